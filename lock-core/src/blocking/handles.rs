//! The blocking API's handles: a semaphore, a read-write lock, and several
//! names taken together, as the async ones are.

use std::fmt;
use std::sync::Arc;

use super::locker::{LockGuard, Locker, Runtime, hold_while, release_on_drop};
use crate::error::{Error, Result};
use crate::handle::LockHandle;
use crate::lock_backend::Holder;
use crate::options::AcquireOptions;
use crate::state::LockState;
use crate::token::FencingToken;

impl Locker {
    /// The semaphore `name` with `permits` permits; see
    /// [`crate::Locker::semaphore`].
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore {
            inner: self.inner.semaphore(name, permits),
            locker: self.clone(),
        }
    }

    /// The read-write lock `name`; see [`crate::Locker::rwlock`].
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock {
            inner: self.inner.rwlock(name),
            locker: self.clone(),
        }
    }

    /// The mutexes `names` taken all or none; see
    /// [`crate::Locker::multi_lock`].
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock {
            inner: self.inner.multi_lock(names),
            locker: self.clone(),
        }
    }
}

/// A blocking counting semaphore; see [`crate::Semaphore`].
#[derive(Clone, Debug)]
pub struct Semaphore {
    inner: crate::Semaphore,
    locker: Locker,
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }

    /// Who holds its permits now, where the backend can tell.
    pub fn holders(&self) -> Result<Vec<Holder>> {
        self.locker.rt.block_on(self.inner.holders())
    }

    /// Blocks until a permit is acquired with the default options.
    pub fn acquire(&self) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.acquire()))
    }

    /// One attempt at a permit: [`Error::Busy`] if all are held.
    pub fn try_acquire(&self) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.try_acquire()))
    }

    /// Acquires a permit with `opts`.
    pub fn acquire_with(&self, opts: AcquireOptions) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.acquire_with(opts)))
    }

    /// Runs `section` while holding a permit; see [`Locker::with_lock`].
    pub fn with_permit<T>(&self, section: impl FnOnce(&LockHandle) -> T) -> Result<T> {
        hold_while(self.acquire()?, section)
    }
}

/// A blocking read-write lock; see [`crate::RwLock`].
#[derive(Clone, Debug)]
pub struct RwLock {
    inner: crate::RwLock,
    locker: Locker,
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Who holds it now, readers and writer, where the backend can tell.
    pub fn holders(&self) -> Result<Vec<Holder>> {
        self.locker.rt.block_on(self.inner.holders())
    }

    /// Blocks until the read side is acquired with the default options.
    pub fn read(&self) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.read()))
    }

    /// Blocks until the write side is acquired with the default options.
    pub fn write(&self) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.write()))
    }

    /// One attempt at the read side.
    pub fn try_read(&self) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.try_read()))
    }

    /// One attempt at the write side.
    pub fn try_write(&self) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.try_write()))
    }

    /// The read side with `opts`.
    pub fn read_with(&self, opts: AcquireOptions) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.read_with(opts)))
    }

    /// The write side with `opts`.
    pub fn write_with(&self, opts: AcquireOptions) -> Result<LockGuard> {
        self.locker
            .guard(self.locker.rt.block_on(self.inner.write_with(opts)))
    }

    /// Runs `section` while holding the read side.
    pub fn with_read<T>(&self, section: impl FnOnce(&LockHandle) -> T) -> Result<T> {
        hold_while(self.read()?, section)
    }

    /// Runs `section` while holding the write side.
    pub fn with_write<T>(&self, section: impl FnOnce(&LockHandle) -> T) -> Result<T> {
        hold_while(self.write()?, section)
    }
}

/// Blocking mutexes taken all or none; see [`crate::MultiLock`].
#[derive(Clone, Debug)]
pub struct MultiLock {
    inner: crate::MultiLock,
    locker: Locker,
}

impl MultiLock {
    fn guard(&self, held: Result<crate::MultiGuard>) -> Result<MultiGuard> {
        held.map(|held| MultiGuard {
            held: Some(held),
            rt: self.locker.rt.clone(),
        })
    }

    /// The names, in the order they are taken.
    pub fn names(&self) -> &[String] {
        self.inner.names()
    }

    /// Blocks until every name is acquired with the default options.
    pub fn lock(&self) -> Result<MultiGuard> {
        self.guard(self.locker.rt.block_on(self.inner.lock()))
    }

    /// One attempt at each name: [`Error::Busy`] if any is held.
    pub fn try_lock(&self) -> Result<MultiGuard> {
        self.guard(self.locker.rt.block_on(self.inner.try_lock()))
    }

    /// Every name with `opts`.
    pub fn lock_with(&self, opts: AcquireOptions) -> Result<MultiGuard> {
        self.guard(self.locker.rt.block_on(self.inner.lock_with(opts)))
    }

    /// Runs `section` while holding every name; `Lost` if any was lost by
    /// the time it returns.
    pub fn with_lock<T>(&self, section: impl FnOnce(&[LockHandle]) -> T) -> Result<T> {
        let held = self.lock()?;
        let handles = held.handles();
        let out = section(&handles);
        if let Some(lost) = handles.iter().find(|h| h.is_lost()) {
            return Err(Error::Lost {
                name: lost.name().to_string(),
            });
        }
        if let Err(e) = held.release() {
            tracing::warn!(error = %e, "release after the critical section failed");
        }
        Ok(out)
    }
}

/// Every name of a blocking [`MultiLock`], held; dropping it releases them
/// all before `drop` returns.
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    held: Option<crate::MultiGuard>,
    rt: Arc<Runtime>,
}

impl MultiGuard {
    fn inner(&self) -> &crate::MultiGuard {
        self.held.as_ref().expect("taken only when the guard goes")
    }

    /// Each name's handle, in the order they were taken.
    pub fn handles(&self) -> Vec<LockHandle> {
        self.inner().guards().iter().map(|g| g.handle()).collect()
    }

    /// Each name's fencing token, in the same order.
    pub fn tokens(&self) -> Vec<FencingToken> {
        self.inner().tokens()
    }

    /// The worst state of any name.
    pub fn state(&self) -> LockState {
        self.inner().state()
    }

    /// Whether any name has been lost.
    pub fn is_lost(&self) -> bool {
        self.inner().is_lost()
    }

    /// Releases every name; see [`crate::MultiGuard::release`].
    pub fn release(mut self) -> Result<()> {
        let held = self.held.take().expect("taken only once");
        self.rt.block_on(held.release())
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.held {
            Some(held) => held.fmt(f),
            None => f.write_str("MultiGuard(released)"),
        }
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            release_on_drop(&self.rt, move || held.release());
        }
    }
}
