//! The same locks for code that is not async (as `reqwest::blocking` does
//! for HTTP): each call blocks the calling thread until it is done, and a
//! runtime of the locker's own renews leases in the background.
//!
//! A lock asked for again by the thread that holds it gets
//! [`Error::AlreadyHeld`](crate::Error::AlreadyHeld), or a second hold
//! with [`AcquireOptions::reentrant`](crate::AcquireOptions::reentrant): here the thread is what a task is to
//! the async [`Locker`](crate::Locker). Dropping a guard releases the lock
//! before `drop` returns. Do not call these from async code: blocking a
//! runtime's thread on another runtime panics, as Tokio's `block_on` does.
//!
//! ```
//! use lock_core::MemoryBackend;
//! use lock_core::blocking::Locker;
//!
//! let locker = Locker::new(MemoryBackend::new())?;
//! let guard = locker.lock("nightly-report")?;
//! println!("fencing token {}", guard.token());
//! assert!(locker.try_lock("nightly-report").unwrap_err().is_busy());
//! drop(guard); // released here
//! locker.try_lock("nightly-report")?.release()?;
//! # Ok::<(), lock_core::Error>(())
//! ```

mod handles;
mod locker;

pub use handles::{MultiGuard, MultiLock, RwLock, Semaphore};
pub use locker::{LockGuard, Locker};
