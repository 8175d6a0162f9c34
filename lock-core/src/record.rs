//! What one [`Locker`](crate::Locker) and its clones keep about one name
//! while anybody uses it, in one record: the queue of its local waiters'
//! turns (`turns.rs`), how many of its guards hold it, and which task holds
//! which grant of it (`held.rs`). The record lives in a
//! [`PerName`](crate::per_name::PerName) map and goes with its last user:
//! a waiter's turn, a guard's hold.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use tokio::sync::{Mutex as FifoMutex, Notify};

use crate::kind::LockKind;
use crate::per_name::PerName;

/// Every name's record, for a locker and its clones.
#[derive(Debug)]
pub(crate) struct Records<T>(pub(crate) PerName<Record<T>>);

impl<T> Default for Records<T> {
    fn default() -> Self {
        Self(PerName::default())
    }
}

/// One name's record; `T` is the grant a hold keeps (`Holding`).
#[derive(Debug)]
pub(crate) struct Record<T> {
    /// The local waiters' turns at the backend: Tokio's mutex queues its
    /// waiters first come, first served.
    pub(crate) fifo: Arc<FifoMutex<()>>,
    /// Guards of this locker holding the name for its waiters' turns.
    pub(crate) held: AtomicUsize,
    /// Told when one of them lets go.
    pub(crate) let_go: Notify,
    /// The grants of the name by the task that took each.
    pub(crate) holds: Mutex<Vec<Hold<T>>>,
}

impl<T> Default for Record<T> {
    fn default() -> Self {
        Self {
            fifo: Arc::default(),
            held: AtomicUsize::new(0),
            let_go: Notify::new(),
            holds: Mutex::default(),
        }
    }
}

/// One task's hold of the name.
#[derive(Debug)]
pub(crate) struct Hold<T> {
    pub(crate) caller: Caller,
    pub(crate) kind: LockKind,
    pub(crate) grant: Weak<T>,
}

/// Who is asking: the Tokio task, or, outside any task (the future given
/// to `block_on`), the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    Task(tokio::task::Id),
    Thread(ThreadId),
}

impl Caller {
    pub(crate) fn current() -> Self {
        match tokio::task::try_id() {
            Some(id) => Caller::Task(id),
            None => Caller::Thread(std::thread::current().id()),
        }
    }
}
