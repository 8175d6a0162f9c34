//! A held lock: the guard that keeps it and releases it.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::handle::LockHandle;
use crate::holding::Holding;
use crate::lease::Lease;

/// A held lock, kept alive by a background task that renews the lease at about
/// a third of its TTL (started only when that first renewal is due, so a lock
/// held briefly costs no task).
///
/// The guard dereferences to its [`LockHandle`]: its name, fencing token,
/// lease and state are read the same way on both.
///
/// Release it with [`LockGuard::release`], which reports whether the lock was
/// still ours. Dropping the guard never blocks: it stops the renewals and, if a
/// Tokio runtime is running, releases the lock in the background; otherwise
/// the lock frees itself when its TTL runs out. A reentrant hold (see
/// [`AcquireOptions::reentrant`](crate::AcquireOptions::reentrant)) is a
/// second guard of the same grant: the lock is released when the last of
/// them goes.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    holding: Arc<Holding>,
}

impl LockGuard {
    pub(crate) fn new(holding: Arc<Holding>) -> Self {
        Self { holding }
    }

    /// A cloneable view of this lock for the code running under it.
    pub fn handle(&self) -> LockHandle {
        self.holding.handle.clone()
    }

    /// How many guards hold this grant: 1, or more for reentrant holds.
    pub fn holds(&self) -> usize {
        Arc::strong_count(&self.holding)
    }

    /// Renews the lease now, for `ttl` from now, once the backend has
    /// checked that the lock is still ours; the renewals that follow use
    /// `ttl` too. The fencing token does not change.
    ///
    /// Returns the lease as renewed. Where a lease lives as long as a
    /// session that all of a client's locks share (etcd, ZooKeeper), the
    /// backend keeps the session's TTL, and the returned lease's
    /// [`Lease::ttl`] says so.
    ///
    /// Fails with [`Error::InvalidTtl`] for a TTL the backend cannot keep,
    /// with [`Error::Lost`] if the lock was lost already, and with
    /// [`Error::NotHeld`] if the backend found it gone, which makes it lost.
    /// Any other failure (an unreachable backend) leaves the lease as it
    /// was, and the keep-alive goes on renewing it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let guard = locker.lock("import").await?;
    /// // The rest of the import may take a while: keep the lock for longer
    /// // if this process dies half-way.
    /// let lease = guard.extend(Duration::from_secs(120)).await?;
    /// assert_eq!(lease.ttl(), Duration::from_secs(120));
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<Lease> {
        self.holding.extend(ttl).await
    }

    /// Asks the backend whether the lock is still ours: whether it still
    /// holds this grant (the same owner and fencing token, or the same
    /// queue entry) unexpired. Reads only; the lease is not extended.
    ///
    /// `Ok(false)` at once, with no request, if the lock is already lost;
    /// `Ok(false)` too if the backend says it is not ours, which makes it
    /// lost. An error (an unreachable backend) says nothing either way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let guard = locker.lock("compaction").await?;
    /// assert!(guard.is_held().await?);
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_held(&self) -> Result<bool> {
        self.holding.is_held().await
    }

    /// Lets go of this hold; the last hold of a grant stops renewing and
    /// releases the lock.
    ///
    /// Two errors say that the critical section may have overlapped with
    /// another holder's, and differ only in who noticed first:
    /// [`Error::Lost`] if this process had already found the lock lost
    /// (the lost signal had fired, or the lease's deadline had passed), and
    /// [`Error::NotHeld`] if the backend found the lease expired or taken
    /// over when asked to release it. [`Error::is_lost`] is true of both. A
    /// lost lock is still released on the backend, in case the local
    /// deadline (which errs early) beat the server's. An earlier hold of a
    /// reentrant grant reports `Lost` the same way, and otherwise `Ok`
    /// without a request.
    ///
    /// Cancel-safe: if this future is dropped before the backend answered,
    /// the release is sent again in the background, as for a dropped guard.
    pub async fn release(self) -> Result<()> {
        match Arc::try_unwrap(self.holding) {
            Ok(last) => last.release().await,
            Err(shared) if shared.handle.is_lost() => Err(Error::Lost {
                name: shared.handle.name.to_string(),
            }),
            Err(_) => Ok(()),
        }
    }
}

impl Deref for LockGuard {
    type Target = LockHandle;

    fn deref(&self) -> &LockHandle {
        &self.holding.handle
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.lease())
            .field("state", &self.state())
            .field("holds", &self.holds())
            .finish_non_exhaustive()
    }
}
