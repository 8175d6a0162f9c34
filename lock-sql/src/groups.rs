//! Which lock a request or a lease is of, and where it is kept: the mutex
//! and elections in a row of their own ([`Single`]), semaphores and
//! read-write locks in a group's rows ([`GroupKey`]), with what one attempt
//! at those asks for ([`Want`]). The admission rule is in `admission.rs`
//! (SQLite, MySQL) and in PostgreSQL's function (`postgres.rs`).
//!
//! Each holder is a row of the holders table, keyed by (family, name,
//! owner); a writer that was refused keeps a row of kind `wait` there until
//! it is granted, gives up or its TTL runs out, so that arriving readers
//! hold back. The groups table keeps one row per (family, name): the last
//! token handed out, and the row every attempt locks first, so that
//! attempts on one lock are admitted one at a time.

use lock_core::LockKind;
use lock_core::backend::Family;

/// The families with one row per name and at most one holder, each in a
/// table of its own: the mutex in the locks table, elections in the
/// elections table, whose row also holds the leader's value. The same
/// statements run on both, so a leader is granted, renewed, released and
/// fenced exactly as the mutex's holder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Single {
    Mutex,
    Election,
}

/// Where a lock is kept.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    Single(Single),
    Group(GroupKey, Want),
}

impl Place {
    pub(crate) fn of(kind: LockKind, name: &str) -> Self {
        match (kind.family(), Want::of(kind)) {
            (family, Some(want)) => Self::Group(GroupKey::new(family, name), want),
            (Family::Election, None) => Self::Single(Single::Election),
            (_, None) => Self::Single(Single::Mutex),
        }
    }
}

/// One semaphore or read-write lock: its family's tag and its name.
#[derive(Clone, Debug)]
pub(crate) struct GroupKey {
    pub(crate) family: &'static str,
    pub(crate) name: String,
}

impl GroupKey {
    pub(crate) fn new(family: Family, name: &str) -> Self {
        Self {
            family: family.tag(),
            name: name.to_owned(),
        }
    }
}

/// What one attempt asks for: the `kind` column of the row it would get,
/// and for a permit, the semaphore's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Want {
    pub(crate) kind: &'static str,
    pub(crate) permits: i64,
}

impl Want {
    /// `None` for the mutex and elections, which have no rows here.
    pub(crate) fn of(kind: LockKind) -> Option<Self> {
        let (kind, permits) = match kind {
            LockKind::Permit { permits } => ("permit", i64::from(permits)),
            LockKind::Read => ("read", 0),
            LockKind::Write => ("write", 0),
            _ => return None,
        };
        Some(Self { kind, permits })
    }
}
