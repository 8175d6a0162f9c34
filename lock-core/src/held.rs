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

use std::sync::{Arc, MutexGuard, Weak};

use crate::error::{Error, Result};
use crate::kind::LockKind;
use crate::name::LockName;
use crate::per_name::Entry;
use crate::record::{Caller, Hold, Record, Records};

/// Whether a task holding `held` of a name would wait on itself asking for
/// `asked` of it: the mutex or the leadership again, or a side of a
/// read-write lock that excludes a side it holds. A second permit or a
/// second read may well be granted (a read may still wait on itself behind
/// a writer that queued in between; nothing here can see that).
fn waits_on_itself(asked: LockKind, held: LockKind) -> bool {
    match asked {
        LockKind::Exclusive | LockKind::Write | LockKind::Leader => true,
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

fn holds<T>(record: &Record<T>) -> MutexGuard<'_, Vec<Hold<T>>> {
    record.holds.lock().unwrap_or_else(|p| p.into_inner())
}

/// The calling task's holds of `name` in the family of `kind`.
fn own<T>(holds: &[Hold<T>], kind: LockKind) -> impl Iterator<Item = &Hold<T>> {
    let caller = Caller::current();
    holds
        .iter()
        .filter(move |h| h.caller == caller && h.kind.family() == kind.family())
}

impl<T> Records<T> {
    /// [`Error::AlreadyHeld`] if the calling task holds `kind`'s lock of
    /// `name` in a way that asking for `kind` would wait on.
    pub(crate) fn check(&self, name: &LockName, kind: LockKind) -> Result<()> {
        let Some(record) = self.0.get(name) else {
            return Ok(());
        };
        if own(&holds(&record), kind).any(|h| waits_on_itself(kind, h.kind)) {
            return Err(Error::AlreadyHeld {
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// The grant through which the calling task holds `name` in a way an
    /// ask for `kind` may share, if it holds one still alive.
    pub(crate) fn shared(&self, name: &LockName, kind: LockKind) -> Option<Arc<T>> {
        let record = self.0.get(name)?;
        let holds = holds(&record);
        own(&holds, kind)
            .filter(|h| shares(kind, h.kind))
            .find_map(|h| h.grant.upgrade())
    }

    /// Counts `kind` of `name` as held by the calling task through `grant`
    /// until the mark is dropped.
    pub(crate) fn mark(&self, name: &LockName, kind: LockKind, grant: Weak<T>) -> HeldMark<T> {
        let record = self.0.get_or_make(name);
        holds(&record).push(Hold {
            caller: Caller::current(),
            kind,
            grant: grant.clone(),
        });
        HeldMark { record, grant }
    }
}

/// One grant's hold in its name's record, removed when the grant is gone;
/// it keeps the record.
pub(crate) struct HeldMark<T> {
    record: Arc<Entry<Record<T>>>,
    grant: Weak<T>,
}

impl<T> Drop for HeldMark<T> {
    fn drop(&mut self) {
        let mut holds = holds(&self.record);
        if let Some(at) = holds
            .iter()
            .position(|h| Weak::ptr_eq(&h.grant, &self.grant))
        {
            holds.swap_remove(at);
        }
    }
}
