//! The application-facing API over any backend.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::backend::{BackendStats, Holder, LockBackend};
use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::guard::{LockGuard, LockHandle};
use crate::held::HeldNames;
use crate::kind::LockKind;
use crate::lease::Lease;
use crate::name::LockName;
use crate::options::{AcquireOptions, Wait};
use crate::renewal_queue::RenewalQueue;
use crate::turns::Turns;

mod acquire;

/// Acquires locks from one backend: validates input, keeps leases renewed
/// through [`LockGuard`], and makes every acquire cancel-safe.
///
/// Cheap to clone; clones share the backend and the task that starts
/// renewals. Like the backend's connections, that task lives on the Tokio
/// runtime where the locker first hands out a guard.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use lock_core::{Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// let guard = locker.lock("nightly-report").await?;
/// println!("fencing token {}", guard.token());
/// assert!(locker.try_lock("nightly-report").await?.is_none());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    backend: Arc<dyn LockBackend>,
    defaults: AcquireOptions,
    renewals: Arc<RenewalQueue>,
    turns: Arc<Turns>,
    held: Arc<HeldNames>,
    /// Whether metrics carry the lock name as a label.
    name_labels: bool,
}

impl Locker {
    /// A locker over `backend` with [`AcquireOptions::default`].
    pub fn new(backend: impl LockBackend) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    /// A locker over a backend that is already shared.
    pub fn from_arc(backend: Arc<dyn LockBackend>) -> Self {
        Self {
            backend,
            defaults: AcquireOptions::default(),
            renewals: Arc::default(),
            turns: Arc::default(),
            held: Arc::default(),
            name_labels: false,
        }
    }

    /// The same locker with other default options for [`Locker::lock`].
    pub fn with_defaults(mut self, defaults: AcquireOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// The same locker with the lock name as a `lock` label on its metrics
    /// (with the `metrics` feature), besides the `backend` label. Off by
    /// default: every name is a series of its own in the metrics store, so
    /// turn it on only where names are few.
    pub fn label_metrics_by_name(mut self, on: bool) -> Self {
        self.name_labels = on;
        self
    }

    /// The default options.
    pub fn defaults(&self) -> AcquireOptions {
        self.defaults
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// The backend's own counters (see [`LockBackend::stats`]).
    pub fn stats(&self) -> BackendStats {
        self.backend.stats()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// Acquires `name` with the default options (by default waiting as long
    /// as it takes) and keeps it renewed.
    pub async fn lock(&self, name: impl AsRef<str>) -> Result<LockGuard> {
        self.lock_with(name, self.defaults).await
    }

    /// Acquires `name` with `opts` and keeps it renewed.
    ///
    /// If `opts` would wait, fails at once with [`Error::AlreadyHeld`] when
    /// the calling task holds `name` through a guard of this locker (or a
    /// clone of it): locks are not reentrant, and the wait would wait on
    /// itself. Other tasks wait for the name as usual; futures joined in
    /// one task are one task. Without a wait ([`Wait::No`]) the answer is
    /// [`Error::Busy`], as for any holder. The same holds for a write
    /// asked for by a task holding either side of the read-write lock, and
    /// a read by a task holding its write.
    pub async fn lock_with(
        &self,
        name: impl AsRef<str>,
        opts: AcquireOptions,
    ) -> Result<LockGuard> {
        let (lease, queue, labels) = self.acquire(name, opts).await?;
        let guard = LockGuard::start(self.backend.clone(), lease, &self.renewals, labels);
        let mark = self.held.mark(guard.name(), guard.kind());
        let guard = guard.held_by(mark);
        Ok(match queue {
            Some(queue) => guard.held_locally(queue.hold()),
            None => guard,
        })
    }

    /// One attempt with the default TTL; `Ok(None)` if the lock is held,
    /// whoever holds it.
    pub async fn try_lock(&self, name: impl AsRef<str>) -> Result<Option<LockGuard>> {
        self.try_kind(name, self.defaults.kind).await
    }

    /// Runs `section` while holding `name`, then releases it, with the
    /// default options.
    ///
    /// If the lock is lost while `section` runs, `section` is dropped at its
    /// next `.await` and the result is [`Error::Lost`]. The section gets a
    /// [`LockHandle`] for the fencing token.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let token = locker.with_lock("migrate", |held| async move { held.token() }).await?;
    /// assert!(token.get() > 0);
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, name: impl AsRef<str>, section: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_lock_options(name, self.defaults, section).await
    }

    /// [`Locker::with_lock`] with `opts` instead of the default options:
    /// another TTL, or a bounded wait.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::{AcquireOptions, Error, Locker, MemoryBackend, Wait};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let held = locker.lock("nightly").await?;
    /// let opts = AcquireOptions::with_ttl(Duration::from_secs(60))
    ///     .wait(Wait::For(Duration::from_millis(50)));
    /// // Another task gives up after 50 ms while the lock is held.
    /// let other = locker.clone();
    /// let outcome = tokio::spawn(async move {
    ///     other.with_lock_options("nightly", opts, |_| async {}).await
    /// })
    /// .await
    /// .unwrap();
    /// assert!(matches!(outcome, Err(Error::WaitTimeout { .. })));
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock_options<F, Fut, T>(
        &self,
        name: impl AsRef<str>,
        opts: AcquireOptions,
        section: F,
    ) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock_with(name, opts).await?;
        let handle = guard.handle();
        let outcome = tokio::select! {
            biased;
            () = handle.lost() => None,
            out = section(handle.clone()) => Some(out),
        };
        match outcome {
            Some(out) => {
                // The section finished while the lock was held; a failed
                // release must not throw its result away.
                if let Err(e) = guard.release().await {
                    tracing::warn!(lock = %handle.name(), error = %e, "release after the critical section failed");
                }
                Ok(out)
            }
            None => Err(Error::Lost {
                name: handle.name().to_string(),
            }),
        }
    }

    /// Acquires one of `permits` permits of the semaphore `name` with the
    /// default TTL and wait, and keeps it renewed. Every user of the name
    /// must ask with the same `permits`.
    ///
    /// Fails at once with [`Error::Unsupported`] on a backend that keeps no
    /// semaphores (see [`Capabilities::semaphores`]), and with
    /// [`Error::InvalidPermits`] for 0 or more than
    /// [`LockKind::MAX_PERMITS`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let a = locker.acquire_permit("encoders", 2).await?;
    /// let b = locker.acquire_permit("encoders", 2).await?;
    /// assert!(locker.try_acquire_permit("encoders", 2).await?.is_none());
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_permit(&self, name: impl AsRef<str>, permits: u32) -> Result<LockGuard> {
        self.lock_with(name, self.defaults.kind(LockKind::permit(permits)))
            .await
    }

    /// One attempt at a permit of the semaphore `name`; `Ok(None)` if all
    /// `permits` are held.
    pub async fn try_acquire_permit(
        &self,
        name: impl AsRef<str>,
        permits: u32,
    ) -> Result<Option<LockGuard>> {
        self.try_kind(name, LockKind::permit(permits)).await
    }

    /// Acquires the read side of the read-write lock `name` (shared with
    /// other readers) with the default TTL and wait, and keeps it renewed.
    /// A reader is not let in while a writer waits.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let r1 = locker.read_lock("catalog").await?;
    /// let r2 = locker.read_lock("catalog").await?;
    /// assert!(locker.try_write_lock("catalog").await?.is_none());
    /// r1.release().await?;
    /// r2.release().await?;
    /// let w = locker.write_lock("catalog").await?;
    /// assert!(locker.try_read_lock("catalog").await?.is_none());
    /// w.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_lock(&self, name: impl AsRef<str>) -> Result<LockGuard> {
        self.lock_with(name, self.defaults.kind(LockKind::Read))
            .await
    }

    /// Acquires the write side of the read-write lock `name` (no readers,
    /// no other writer) with the default TTL and wait, and keeps it renewed.
    /// While it waits, arriving readers wait behind it.
    pub async fn write_lock(&self, name: impl AsRef<str>) -> Result<LockGuard> {
        self.lock_with(name, self.defaults.kind(LockKind::Write))
            .await
    }

    /// One attempt at the read side of `name`; `Ok(None)` if a writer holds
    /// it or waits for it.
    pub async fn try_read_lock(&self, name: impl AsRef<str>) -> Result<Option<LockGuard>> {
        self.try_kind(name, LockKind::Read).await
    }

    /// One attempt at the write side of `name`; `Ok(None)` if anybody holds
    /// it.
    pub async fn try_write_lock(&self, name: impl AsRef<str>) -> Result<Option<LockGuard>> {
        self.try_kind(name, LockKind::Write).await
    }

    /// Runs `section` while holding one of `permits` permits of `name`, as
    /// [`Locker::with_lock`] does for the lock.
    pub async fn with_permit<F, Fut, T>(
        &self,
        name: impl AsRef<str>,
        permits: u32,
        section: F,
    ) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let opts = self.defaults.kind(LockKind::permit(permits));
        self.with_lock_options(name, opts, section).await
    }

    /// Runs `section` while holding the read side of `name`.
    pub async fn with_read_lock<F, Fut, T>(&self, name: impl AsRef<str>, section: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let opts = self.defaults.kind(LockKind::Read);
        self.with_lock_options(name, opts, section).await
    }

    /// Runs `section` while holding the write side of `name`.
    pub async fn with_write_lock<F, Fut, T>(&self, name: impl AsRef<str>, section: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let opts = self.defaults.kind(LockKind::Write);
        self.with_lock_options(name, opts, section).await
    }

    /// One attempt at `kind` of `name` with the default TTL; `Ok(None)` if
    /// it is held.
    async fn try_kind(&self, name: impl AsRef<str>, kind: LockKind) -> Result<Option<LockGuard>> {
        let opts = self.defaults.wait(Wait::No).kind(kind);
        match self.lock_with(name, opts).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Busy { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Acquires a bare [`Lease`] with no renewal: the caller renews and
    /// releases it through [`Locker::backend`].
    ///
    /// Cancel-safe: if this future is dropped while a request is in flight,
    /// the request is allowed to finish (in a task of its own) and whatever
    /// it was granted is released, so no lock is left held by nobody.
    pub async fn acquire_lease(
        &self,
        name: impl AsRef<str>,
        opts: AcquireOptions,
    ) -> Result<Lease> {
        Ok(self.acquire(name, opts).await?.0)
    }

    /// Who holds `name` now, where the backend can tell.
    pub async fn holder(&self, name: impl AsRef<str>) -> Result<Option<Holder>> {
        let name = LockName::new(name)?;
        self.backend.holder(&name).await
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("defaults", &self.defaults)
            .finish()
    }
}
