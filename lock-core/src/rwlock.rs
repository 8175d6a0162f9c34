//! The read-write lock's handle: `locker.rwlock(name)`.

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
    /// The read-write lock `name`: any number of readers together, or one
    /// writer. A reader is not let in while a writer waits, so a stream of
    /// readers cannot starve a writer. Making the handle does no I/O and
    /// cannot fail.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let catalog = locker.rwlock("catalog");
    /// let r1 = catalog.read().await?;
    /// let r2 = catalog.read().await?;
    /// assert!(catalog.try_write().await.unwrap_err().is_busy());
    /// r1.release().await?;
    /// r2.release().await?;
    /// let w = catalog.write().await?;
    /// assert!(catalog.try_read().await.unwrap_err().is_busy());
    /// w.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock {
            locker: self.clone(),
            name: name.into(),
        }
    }
}

/// A read-write lock of one [`Locker`]; see [`Locker::rwlock`]. Cheap to
/// clone.
#[derive(Clone)]
pub struct RwLock {
    locker: Locker,
    name: String,
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Acquires the read side (shared with other readers) with the
    /// locker's default options and keeps it renewed.
    pub async fn read(&self) -> Result<LockGuard> {
        self.read_with(self.locker.defaults()).await
    }

    /// Acquires the write side (no readers, no other writer) with the
    /// locker's default options and keeps it renewed. While it waits,
    /// arriving readers wait behind it.
    pub async fn write(&self) -> Result<LockGuard> {
        self.write_with(self.locker.defaults()).await
    }

    /// One attempt at the read side: [`Error::Busy`](crate::Error::Busy) if
    /// a writer holds it or waits for it.
    pub async fn try_read(&self) -> Result<LockGuard> {
        self.read_with(self.locker.defaults().wait(Wait::No)).await
    }

    /// One attempt at the write side: [`Error::Busy`](crate::Error::Busy) if
    /// anybody holds it.
    pub async fn try_write(&self) -> Result<LockGuard> {
        self.write_with(self.locker.defaults().wait(Wait::No)).await
    }

    /// Acquires the read side with `opts`.
    pub async fn read_with(&self, opts: AcquireOptions) -> Result<LockGuard> {
        self.locker
            .acquire_kind(&self.name, LockKind::Read, opts)
            .await
    }

    /// Acquires the write side with `opts`.
    pub async fn write_with(&self, opts: AcquireOptions) -> Result<LockGuard> {
        self.locker
            .acquire_kind(&self.name, LockKind::Write, opts)
            .await
    }

    /// Who holds the lock now, readers and writer, where the backend can
    /// tell; each [`Holder::kind`] says which side.
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.locker.holders(&self.name, LockKind::Read).await
    }

    /// Runs `section` while holding the read side, as
    /// [`Locker::with_lock`] does for the mutex.
    pub async fn with_read<F, Fut, T>(&self, section: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        hold_while(self.read().await?, section).await
    }

    /// Runs `section` while holding the write side.
    pub async fn with_write<F, Fut, T>(&self, section: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        hold_while(self.write().await?, section).await
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock").field("name", &self.name).finish()
    }
}
