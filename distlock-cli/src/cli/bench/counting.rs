//! A decorator that counts what waiters do, for the wake-ups workload.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::backend::{
    AcquireRequest, Holder, Lease, LockBackend, ReleaseSignals, WaitBudget, Waking, async_trait,
    poll_acquire,
};
use distlock::{Capabilities, LockKind, LockName, Result};

/// Wraps a backend whose waiting is [`poll_acquire`] woken by in-process
/// release signals (memory, SQLite, MySQL, memcache) and counts every attempt that
/// finds the lock held.
///
/// The inner backend's own `acquire` would call its own `try_acquire`, out of
/// sight of this wrapper, so `acquire` is the same `poll_acquire` routed
/// through `self`, with the wrapper's own [`ReleaseSignals`] taking the place
/// of the backend's: the waiting is the backend's, only observed. A backend
/// that waits on the server (a watch, pub/sub) must not be wrapped this way;
/// it counts its wake-ups itself (see docs/BENCHMARKS.md).
#[derive(Debug)]
pub(crate) struct Counting {
    inner: Arc<dyn LockBackend>,
    signals: ReleaseSignals,
    busy: AtomicU64,
}

impl Counting {
    /// Whether the backend `url`'s scheme picks waits the way this wrapper
    /// reproduces. Others are measured unwrapped, without counts.
    pub(crate) fn fits(url: &str) -> bool {
        // MySQL and memcache wait with the same `poll_acquire` (MySQL with
        // a 100 ms backoff cap, the same as `poll_acquire`'s own).
        match super::url::scheme(url) {
            "memory" => true,
            #[cfg(feature = "sqlite")]
            s if distlock::backends::sql::SQLITE_SCHEMES.contains(&s) => true,
            #[cfg(feature = "mysql")]
            s if distlock::backends::sql::MYSQL_SCHEMES.contains(&s) => true,
            #[cfg(feature = "memcache")]
            s if distlock::backends::memcache::SCHEMES.contains(&s) => true,
            _ => false,
        }
    }

    pub(crate) fn new(inner: Arc<dyn LockBackend>) -> Self {
        Self {
            inner,
            signals: ReleaseSignals::new(),
            busy: AtomicU64::new(0),
        }
    }

    /// Attempts so far that found the lock held.
    pub(crate) fn busy_attempts(&self) -> u64 {
        self.busy.load(Ordering::Relaxed)
    }

    /// Release notices delivered to local waiters so far.
    pub(crate) fn notices(&self) -> u64 {
        self.signals.wakeups()
    }
}

#[async_trait]
impl LockBackend for Counting {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let attempt = self.inner.try_acquire(req).await;
        if matches!(attempt, Ok(None)) {
            self.busy.fetch_add(1, Ordering::Relaxed);
        }
        attempt
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(self, req, budget, Waking::signalled(&self.signals)).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.renew(lease, ttl).await
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        self.inner.is_held(lease).await
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let released = self.inner.release(lease).await;
        self.signals.notify(lease.name());
        released
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        let abandoned = self.inner.abandon(req).await;
        self.signals.notify(&req.name);
        abandoned
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        self.inner.holders(name, kind).await
    }
}
