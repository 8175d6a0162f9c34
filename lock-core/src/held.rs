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
use crate::kind::{Family, LockKind};
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
    names: Mutex<Holds>,
}

/// Who holds what, by family and name.
type Holds = HashMap<(Family, LockName), Vec<(Caller, LockKind)>>;

/// Whether a task holding `held` of a name would wait on itself asking for
/// `asked` of it: the mutex again, or a side of a read-write lock that
/// excludes a side it holds. A second permit or a second read may well be
/// granted (a read may still wait on itself behind a writer that queued in
/// between; nothing here can see that).
/// `held` is of the same family as `asked`: holds are kept by family.
fn waits_on_itself(asked: LockKind, held: LockKind) -> bool {
    match asked {
        LockKind::Exclusive | LockKind::Write => true,
        LockKind::Read => held == LockKind::Write,
        _ => false,
    }
}

impl HeldNames {
    fn names(&self) -> MutexGuard<'_, Holds> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Error::AlreadyHeld`] if the calling task holds `kind`'s lock of
    /// `name` in a way that asking for `kind` would wait on.
    pub(crate) fn check(&self, name: &LockName, kind: LockKind) -> Result<()> {
        let caller = Caller::current();
        let key = (kind.family(), name.clone());
        match self.names().get(&key) {
            Some(holds)
                if holds
                    .iter()
                    .any(|(c, held)| *c == caller && waits_on_itself(kind, *held)) =>
            {
                Err(Error::AlreadyHeld {
                    name: name.to_string(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Counts `kind` of `name` as held by the calling task until the mark
    /// is dropped.
    pub(crate) fn mark(self: &Arc<Self>, name: &LockName, kind: LockKind) -> HeldMark {
        let caller = Caller::current();
        let key = (kind.family(), name.clone());
        self.names()
            .entry(key.clone())
            .or_default()
            .push((caller, kind));
        HeldMark {
            names: self.clone(),
            key,
            hold: (caller, kind),
        }
    }
}

/// One guard's entry in [`HeldNames`], removed when the guard is gone.
pub(crate) struct HeldMark {
    names: Arc<HeldNames>,
    key: (Family, LockName),
    hold: (Caller, LockKind),
}

impl Drop for HeldMark {
    fn drop(&mut self) {
        let mut names = self.names.names();
        if let Some(holds) = names.get_mut(&self.key) {
            if let Some(at) = holds.iter().position(|h| *h == self.hold) {
                holds.swap_remove(at);
            }
            if holds.is_empty() {
                names.remove(&self.key);
            }
        }
    }
}
