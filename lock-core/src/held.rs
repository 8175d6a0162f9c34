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
//!
//! A reentrant acquire ([`AcquireOptions::reentrant`]) finds here the grant
//! the task holds, to share it instead.
//!
//! [`AcquireOptions::reentrant`]: crate::AcquireOptions::reentrant

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
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

/// The held names of one locker and its clones, each with the grant `T`
/// that holds it.
pub(crate) struct HeldNames<T> {
    names: Mutex<Holds<T>>,
}

impl<T> Default for HeldNames<T> {
    fn default() -> Self {
        Self {
            names: Mutex::default(),
        }
    }
}

/// One task's hold of one name.
struct Hold<T> {
    caller: Caller,
    kind: LockKind,
    grant: Weak<T>,
}

/// Who holds what, by family and name.
type Holds<T> = HashMap<(Family, LockName), Vec<Hold<T>>>;

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

/// Whether a task holding `held` may share it when asking again for
/// `asked`: the same mutex or side, or a read under its own write.
fn shares(asked: LockKind, held: LockKind) -> bool {
    match asked {
        LockKind::Exclusive | LockKind::Write => held == asked,
        LockKind::Read => matches!(held, LockKind::Read | LockKind::Write),
        _ => false,
    }
}

impl<T> HeldNames<T> {
    fn names(&self) -> MutexGuard<'_, Holds<T>> {
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
                    .any(|h| h.caller == caller && waits_on_itself(kind, h.kind)) =>
            {
                Err(Error::AlreadyHeld {
                    name: name.to_string(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The grant through which the calling task holds `name` in a way an
    /// ask for `kind` may share, if it holds one still alive.
    pub(crate) fn shared(&self, name: &LockName, kind: LockKind) -> Option<Arc<T>> {
        let caller = Caller::current();
        let key = (kind.family(), name.clone());
        let names = self.names();
        names
            .get(&key)?
            .iter()
            .filter(|h| h.caller == caller && shares(kind, h.kind))
            .find_map(|h| h.grant.upgrade())
    }

    /// Counts `kind` of `name` as held by the calling task through `grant`
    /// until the mark is dropped.
    pub(crate) fn mark(
        self: &Arc<Self>,
        name: &LockName,
        kind: LockKind,
        grant: Weak<T>,
    ) -> HeldMark<T> {
        let caller = Caller::current();
        let key = (kind.family(), name.clone());
        self.names().entry(key.clone()).or_default().push(Hold {
            caller,
            kind,
            grant: grant.clone(),
        });
        HeldMark {
            names: self.clone(),
            key,
            grant,
        }
    }
}

/// One grant's entry in [`HeldNames`], removed when the grant is gone.
pub(crate) struct HeldMark<T> {
    names: Arc<HeldNames<T>>,
    key: (Family, LockName),
    grant: Weak<T>,
}

impl<T> Drop for HeldMark<T> {
    fn drop(&mut self) {
        let mut names = self.names.names();
        if let Some(holds) = names.get_mut(&self.key) {
            if let Some(at) = holds
                .iter()
                .position(|h| Weak::ptr_eq(&h.grant, &self.grant))
            {
                holds.swap_remove(at);
            }
            if holds.is_empty() {
                names.remove(&self.key);
            }
        }
    }
}
