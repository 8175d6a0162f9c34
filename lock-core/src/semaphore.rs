//! The counting semaphore's handle: `locker.semaphore(name, permits)`.

use std::fmt;
use std::future::Future;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::handle::LockHandle;
use crate::kind::LockKind;
use crate::lock_backend::Holder;
use crate::locker::Locker;
use crate::options::{AcquireOptions, Wait};
use crate::section::hold_while;

impl Locker {
    /// The counting semaphore `name` with `permits` permits: at most that
    /// many holders at a time. Every user of a name must use the same
    /// number of permits; the backend checks each request's number (as
    /// Curator's `InterProcessSemaphoreV2` does).
    ///
    /// Making the handle does no I/O and cannot fail; its acquires fail
    /// with [`Error::Unsupported`](crate::Error::Unsupported) on a backend
    /// that keeps no semaphores (see [`Capabilities::semaphores`](crate::Capabilities::semaphores)), with
    /// [`Error::InvalidPermits`](crate::Error::InvalidPermits) for 0 or more than
    /// [`LockKind::MAX_PERMITS`], and with
    /// [`Error::InvalidName`](crate::Error::InvalidName) for a bad name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let encoders = locker.semaphore("encoders", 2);
    /// let a = encoders.acquire().await?;
    /// let b = encoders.acquire().await?;
    /// assert!(encoders.try_acquire().await.unwrap_err().is_busy());
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore {
            locker: self.clone(),
            name: name.into(),
            permits,
        }
    }
}

/// A counting semaphore of one [`Locker`]; see [`Locker::semaphore`].
/// Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    locker: Locker,
    name: String,
    permits: u32,
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn kind(&self) -> LockKind {
        LockKind::permit(self.permits)
    }

    /// Acquires a permit with the locker's default options and keeps it
    /// renewed.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.acquire_with(self.locker.defaults()).await
    }

    /// One attempt at a permit: [`Error::Busy`](crate::Error::Busy) if all
    /// are held.
    pub async fn try_acquire(&self) -> Result<LockGuard> {
        self.acquire_with(self.locker.defaults().wait(Wait::No))
            .await
    }

    /// Acquires a permit with `opts`. A permit is never shared, reentrant
    /// or not.
    pub async fn acquire_with(&self, opts: AcquireOptions) -> Result<LockGuard> {
        self.locker
            .acquire_kind(&self.name, self.kind(), opts)
            .await
    }

    /// Who holds the semaphore's permits now, where the backend can tell.
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.locker.holders(&self.name, self.kind()).await
    }

    /// Runs `section` while holding a permit, as
    /// [`Locker::with_lock`] does for the mutex.
    pub async fn with_permit<F, Fut, T>(&self, section: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        hold_while(self.acquire().await?, section).await
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish()
    }
}
