//! The contract every backend implements: the [`LockBackend`] trait, and
//! the [`Holder`] it reports. Backend authors reach it, with everything
//! else they need, through the `backend` module.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::kind::{Family, LockKind};
use crate::leader::Leader;
use crate::lease::Lease;
use crate::name::LockName;
use crate::options::{AcquireRequest, WaitBudget};
use crate::stats::BackendStats;
use crate::token::FencingToken;
use crate::wait::Waking;

/// Waits for `req` within `budget` by polling `backend.try_acquire` with
/// jittered exponential backoff, woken early by `waking`'s signals when a
/// release happens in this process (or its server announces one into
/// them): the [`acquire`](LockBackend::acquire) of a backend without a
/// server-side queue.
///
/// Retryable backend errors (a dropped connection, a busy database) are
/// retried within the budget; the last one is returned if the budget runs
/// out after it.
pub async fn poll_acquire<B: LockBackend + ?Sized>(
    backend: &B,
    req: &AcquireRequest,
    budget: &WaitBudget,
    waking: Waking<'_>,
) -> Result<Lease> {
    crate::wait::poll(backend, req, budget, waking).await
}

impl<B: LockBackend + ?Sized> crate::wait::Attempt for B {
    fn attempt<'a>(
        &'a self,
        req: &'a AcquireRequest,
    ) -> impl Future<Output = Result<Option<Lease>>> + Send + 'a {
        self.try_acquire(req)
    }
}

/// A distributed-lock backend: one object-safe trait, so a backend chosen at
/// run time from a URL can be held as `Arc<dyn LockBackend>`.
///
/// Applications use [`Locker`](crate::Locker), which validates input, renews
/// leases and makes acquires cancel-safe; this trait is the small surface a
/// backend must provide. Every method that talks to a server must finish
/// within the backend's configured timeouts: an unreachable server is an
/// [`Error::Unavailable`] or [`Error::Timeout`], never a hang.
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// What this backend guarantees.
    fn capabilities(&self) -> Capabilities;

    /// One attempt: `Ok(None)` when another owner holds the lock.
    ///
    /// The attempt is idempotent for `req.owner`: if an earlier attempt with
    /// the same request was applied but its reply lost, this one returns that
    /// grant instead of failing.
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>>;

    /// Waits for the lock within `budget`, then fails with
    /// [`WaitBudget::exhausted`]. The default polls
    /// [`try_acquire`](Self::try_acquire) with jittered backoff (see
    /// [`poll_acquire`]); backends that can be
    /// woken by the server override it.
    ///
    /// Implementations stop waiting when the budget's cancellation token
    /// fires, between requests, never in the middle of one.
    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(self, req, budget, Waking::polling()).await
    }

    /// Extends the lease to `ttl` from now if it is still ours; otherwise
    /// [`Error::NotHeld`], never a silent success. The fencing token does not
    /// change.
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease>;

    /// Releases the lock if the lease is still ours. Releasing a lease that
    /// expired or was taken over is [`Error::NotHeld`] and never touches the
    /// new holder's lock.
    async fn release(&self, lease: &Lease) -> Result<()>;

    /// Whether `lease` is still the live grant of its lock on the server:
    /// the same owner holds the name with the same fencing token (or queue
    /// entry), and the server has not expired it. Reads only: nothing is
    /// extended. Behind [`LockGuard::is_held`](crate::LockGuard::is_held).
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let _ = lease;
        Err(Error::Unsupported {
            backend: self.capabilities().backend,
            operation: "checking a lease on the server",
        })
    }

    /// Undoes an attempt whose outcome is unknown (its reply was lost, or the
    /// caller gave up): whatever `req.owner` holds or has queued under
    /// `req.name` is removed. Doing nothing is a success.
    async fn abandon(&self, req: &AcquireRequest) -> Result<()>;

    /// Who holds `kind`'s lock of `name` now, where the backend can tell:
    /// the mutex's one holder or none, every permit holder of a semaphore,
    /// every reader and the writer of a read-write lock (`Read` and `Write`
    /// ask the same), each with its [`Holder::kind`]. Holders whose leases
    /// ran out are not listed.
    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        let _ = name;
        Err(Error::Unsupported {
            backend: self.capabilities().backend,
            operation: match kind.family() {
                Family::Mutex => "inspecting the holder",
                Family::Semaphore => "inspecting a semaphore's holders",
                _ => "inspecting a read-write lock's holders",
            },
        })
    }

    /// Replaces the value that `lease`, a [`LockKind::Leader`] grant,
    /// proclaims, if it still leads; otherwise [`Error::NotHeld`]. The term
    /// (the lease's fencing token) does not change.
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        let _ = (lease, value);
        Err(no_elections(self.capabilities().backend))
    }

    /// The leader of the election `name` now: its value and term, or
    /// `None` while nobody leads. A grant the store has dropped (expired,
    /// released, its session gone) is not listed.
    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let _ = name;
        Err(no_elections(self.capabilities().backend))
    }

    /// Returns once the leader of `name` may differ from `seen` (as
    /// [`leader`](Self::leader) read it), or once `within` has passed (plus
    /// at most the requests it makes, each bounded by the backend's
    /// timeout): what an observer of the election waits on between reads. The
    /// default sleeps `within` (polling); a backend whose server tells of
    /// changes (a watch, a notification) returns as soon as it does. A
    /// spurious return is harmless: the observer reads again.
    async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        let _ = (name, seen);
        tokio::time::sleep(within).await;
        Ok(())
    }

    /// The backend's own counters since it was made (all zero where a
    /// backend counts nothing).
    fn stats(&self) -> BackendStats {
        BackendStats::default()
    }
}

fn no_elections(backend: &'static str) -> Error {
    Error::Unsupported {
        backend,
        operation: Family::Election.operation(),
    }
}

/// The current holder of a lock, as [`LockBackend::holders`] reports it.
///
/// Backends make one with [`Holder::new`] or [`Holder::without_token`]; the
/// fields can be read directly.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The first hex digits of the holder's owner token (see
    /// [`OwnerToken::short`](crate::backend::OwnerToken::short)).
    pub owner: String,
    /// The holder's fencing token, where the backend can read it back
    /// (Redlock cannot: a grant's token is the masters' clock at the grant,
    /// stored nowhere).
    pub token: Option<FencingToken>,
    /// Time left on the lease by the server's clock, if it is known.
    pub expires_in: Option<Duration>,
    /// What the holder holds: the lock, a permit, or a side of a
    /// read-write lock.
    pub kind: LockKind,
}

/// A duration in whole milliseconds for a server that counts in them (a
/// `PX`, an interval column), saturating: TTLs are bounded by
/// [`Capabilities`] long before it could.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Holder {
    /// A holder as a backend reads it: `owner` is the owner token as the
    /// backend stores it (its hex form), of which only the first 8 digits
    /// are kept, as [`OwnerToken::short`](crate::backend::OwnerToken::short) shows
    /// them: the full token would let its reader release the lock.
    pub fn new(owner: &str, token: FencingToken, expires_in: Option<Duration>) -> Self {
        Self {
            owner: owner.chars().take(8).collect(),
            token: Some(token),
            expires_in,
            kind: LockKind::Exclusive,
        }
    }

    /// The same holder, of `kind` (a holder is of the mutex unless said).
    pub fn of_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// A holder whose fencing token the backend cannot read back.
    pub fn without_token(owner: &str, expires_in: Option<Duration>) -> Self {
        Self {
            token: None,
            ..Self::new(owner, FencingToken::new(0), expires_in)
        }
    }
}
