//! What an acquire asks for: the lock itself, one permit of a semaphore, or
//! a shared or exclusive hold of a read-write lock.

use std::fmt;

use crate::error::{Error, Result};

/// What an acquire asks for.
///
/// A mutex, a semaphore and a read-write lock of the same name are three
/// different locks, and so is the election of that name (on etcd, whose own
/// `etcdctl lock` and `etcdctl elect` share one key range, the election and
/// the mutex of a name are one): backends keep each kind's state apart, so a name can be
/// used as a mutex by one part of an application and as a semaphore by
/// another without either seeing the other. [`LockKind::Read`] and
/// [`LockKind::Write`] of one name are the two sides of one read-write lock.
///
/// Every grant of every kind is a [`Lease`](crate::Lease): it is renewed,
/// released and lost as a mutex's is, and carries a fencing token that no
/// other grant of the same lock (the same name and kind family) shares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The lock: one holder at a time.
    #[default]
    Exclusive,
    /// One of `permits` permits of a counting semaphore: at most `permits`
    /// holders at a time. Every user of a name must ask with the same
    /// number; the check is made against the number in each request (as in
    /// Curator's `InterProcessSemaphoreV2`).
    Permit {
        /// How many holders the semaphore admits at once.
        permits: u32,
    },
    /// A shared hold of a read-write lock: any number of readers together,
    /// never with a writer. A reader does not start while a writer waits,
    /// so a stream of readers cannot starve a writer.
    Read,
    /// The exclusive hold of a read-write lock: no other reader or writer.
    Write,
    /// A candidacy in the election of a name (see
    /// [`Locker::election`](crate::Locker::election)): granted to one
    /// candidate at a time, the leader, whose lease carries the value it
    /// proclaims and whose fencing token is its term.
    Leader,
}

impl LockKind {
    /// The most permits a semaphore may have: more is almost certainly a
    /// mistake, and some backends keep one record per permit.
    pub const MAX_PERMITS: u32 = 1024;

    /// One permit of a semaphore with `permits` permits.
    pub const fn permit(permits: u32) -> Self {
        LockKind::Permit { permits }
    }

    /// Checks the kind's own parameters (a semaphore's permit count).
    pub fn check(self) -> Result<()> {
        match self {
            LockKind::Permit { permits } if permits == 0 || permits > Self::MAX_PERMITS => {
                Err(Error::InvalidPermits {
                    permits,
                    max: Self::MAX_PERMITS,
                })
            }
            _ => Ok(()),
        }
    }

    /// The family of locks this kind belongs to: the mutex, the semaphore,
    /// or the read-write lock of a name. Backends keep each family's state
    /// under its own keys.
    pub const fn family(self) -> Family {
        match self {
            LockKind::Exclusive => Family::Mutex,
            LockKind::Permit { .. } => Family::Semaphore,
            LockKind::Read | LockKind::Write => Family::ReadWrite,
            LockKind::Leader => Family::Election,
        }
    }

    /// Whether holders of this kind exclude every other holder (a mutex, a
    /// writer or a leader).
    pub const fn is_exclusive(self) -> bool {
        matches!(
            self,
            LockKind::Exclusive | LockKind::Write | LockKind::Leader
        )
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockKind::Exclusive => f.write_str("lock"),
            LockKind::Permit { permits } => write!(f, "permit of {permits}"),
            LockKind::Read => f.write_str("read lock"),
            LockKind::Write => f.write_str("write lock"),
            LockKind::Leader => f.write_str("leadership"),
        }
    }
}

/// The four families of locks a name can have (see [`LockKind::family`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Family {
    /// [`LockKind::Exclusive`].
    Mutex,
    /// [`LockKind::Permit`].
    Semaphore,
    /// [`LockKind::Read`] and [`LockKind::Write`].
    ReadWrite,
    /// [`LockKind::Leader`].
    Election,
}

impl Family {
    /// A short tag for keys and messages: `""` for the mutex (whose keys
    /// predate the other families and keep their layout), `"sem"`, `"rw"`,
    /// `"elect"`.
    pub const fn tag(self) -> &'static str {
        match self {
            Family::Mutex => "",
            Family::Semaphore => "sem",
            Family::ReadWrite => "rw",
            Family::Election => "elect",
        }
    }

    /// What the family is called in an [`Error::Unsupported`].
    pub const fn operation(self) -> &'static str {
        match self {
            Family::Mutex => "locks",
            Family::Semaphore => "semaphores",
            Family::ReadWrite => "read-write locks",
            Family::Election => "elections",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_counts_are_checked() {
        assert!(LockKind::permit(1).check().is_ok());
        assert!(LockKind::permit(LockKind::MAX_PERMITS).check().is_ok());
        for bad in [0, LockKind::MAX_PERMITS + 1, u32::MAX] {
            let e = LockKind::permit(bad).check().unwrap_err();
            assert!(e.is_invalid_input(), "{e}");
            assert!(e.to_string().contains(&bad.to_string()), "{e}");
        }
    }
}
