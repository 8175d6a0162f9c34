//! Locks for code that is not async; see [`lock_core::blocking`].
//!
//! ```
//! # fn main() -> distlock::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let url = format!("sqlite://{}", dir.path().join("locks.db").display());
//! let locker = distlock::blocking::connect(&url)?;
//! let guard = locker.lock("nightly-report")?;
//! println!("fencing token {}", guard.token());
//! guard.release()?;
//! # Ok(()) }
//! ```

pub use lock_core::blocking::{LockGuard, Locker, MultiGuard, MultiLock, RwLock, Semaphore};

use crate::connect::connect as connect_async;
use lock_core::Result;

/// Connects to the backend at `url` (see [`crate::connect`]) on the
/// blocking locker's own runtime.
pub fn connect(url: &str) -> Result<Locker> {
    Locker::from_async(|| connect_async(url))
}
