//! The names a locker's guards hold, and which task took each, so that a
//! task asking again for a name it already holds fails at once with
//! [`Error::AlreadyHeld`] instead of waiting on itself.
//!
//! Other tasks sharing the locker still wait for the name as usual: one
//! locker shared by many tasks is how an application serialises them. A
//! guard moved to another task still counts for the task that took it; that
//! task gets `AlreadyHeld` until the guard is gone. Futures run together
//! inside one task (`join!`, `select!`, `FuturesUnordered`) are one task
//! here: the second to lock a name the first holds gets `AlreadyHeld` —
//! spawn them as tasks to have them take turns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use crate::error::{Error, Result};
use crate::name::LockName;

/// Who is asking: the Tokio task, or, outside any task (the future given
/// to `block_on`), the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    Task(tokio::task::Id),
    Thread(ThreadId),
}

impl Caller {
    fn current() -> Self {
        match tokio::task::try_id() {
            Some(id) => Caller::Task(id),
            None => Caller::Thread(std::thread::current().id()),
        }
    }
}

/// The held names of one locker and its clones.
#[derive(Default)]
pub(crate) struct HeldNames {
    names: Mutex<HashMap<LockName, Vec<Caller>>>,
}

impl HeldNames {
    fn names(&self) -> MutexGuard<'_, HashMap<LockName, Vec<Caller>>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Error::AlreadyHeld`] if the calling task holds `name`.
    pub(crate) fn check(&self, name: &LockName) -> Result<()> {
        let caller = Caller::current();
        match self.names().get(name) {
            Some(callers) if callers.contains(&caller) => Err(Error::AlreadyHeld {
                name: name.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Counts `name` as held by the calling task until the mark is dropped.
    pub(crate) fn mark(self: &Arc<Self>, name: &LockName) -> HeldMark {
        let caller = Caller::current();
        self.names().entry(name.clone()).or_default().push(caller);
        HeldMark {
            names: self.clone(),
            name: name.clone(),
            caller,
        }
    }
}

/// One guard's entry in [`HeldNames`], removed when the guard is gone.
pub(crate) struct HeldMark {
    names: Arc<HeldNames>,
    name: LockName,
    caller: Caller,
}

impl Drop for HeldMark {
    fn drop(&mut self) {
        let mut names = self.names.names();
        if let Some(callers) = names.get_mut(&self.name) {
            if let Some(at) = callers.iter().position(|c| *c == self.caller) {
                callers.swap_remove(at);
            }
            if callers.is_empty() {
                names.remove(&self.name);
            }
        }
    }
}
