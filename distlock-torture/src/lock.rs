//! Which lock a run's workers take — the mutex, a semaphore, a read-write
//! lock or the election of the run's name — and what each asks of the
//! backend and of the fenced register.

use std::fmt;

use lock_core::LockKind;
use rand::Rng;

/// The lock a group of workers takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lock {
    /// The lock itself: one holder at a time.
    Mutex,
    /// One of `permits` permits of a semaphore: at most `permits` holders.
    Semaphore {
        /// How many holders at once.
        permits: u32,
    },
    /// A read-write lock: readers together, a writer alone.
    ReadWrite,
    /// An election: one leader at a time, writing with its term.
    Election,
}

/// One acquisition in this many of a read-write lock's workers is a write.
const WRITE_ONE_IN: u32 = 3;

impl Lock {
    /// The family's name, as the `lock` column of a README's `Under
    /// faults` table and docs/RELIABILITY.md write it: `mutex`,
    /// `semaphore`, `read-write`, `election`.
    pub const fn label(self) -> &'static str {
        match self {
            Lock::Mutex => "mutex",
            Lock::Semaphore { .. } => "semaphore",
            Lock::ReadWrite => "read-write",
            Lock::Election => "election",
        }
    }

    /// The lock as one word, the permits included: `mutex`,
    /// `semaphore/2`, `read-write` (a worker's argument, a run's JSON).
    pub fn to_arg(self) -> String {
        match self {
            Lock::Semaphore { permits } => format!("semaphore/{permits}"),
            other => other.label().to_owned(),
        }
    }

    /// The lock from [`to_arg`](Self::to_arg)'s word.
    pub fn from_arg(word: &str) -> Result<Self, String> {
        match word.split_once('/') {
            None if word == "mutex" => Ok(Lock::Mutex),
            None if word == "read-write" => Ok(Lock::ReadWrite),
            None if word == "election" => Ok(Lock::Election),
            Some(("semaphore", n)) => match n.parse() {
                Ok(permits) if permits > 0 => Ok(Lock::Semaphore { permits }),
                _ => Err(format!("bad permit count in {word:?}")),
            },
            _ => Err(format!(
                "unknown lock {word:?}: mutex, semaphore/N, read-write or election"
            )),
        }
    }

    /// What one acquisition asks for: a read-write lock's workers write
    /// one time in three, at random, and read otherwise.
    pub fn next_kind(self, rng: &mut impl Rng) -> LockKind {
        match self {
            Lock::Mutex => LockKind::Exclusive,
            Lock::Semaphore { permits } => LockKind::permit(permits),
            Lock::ReadWrite if rng.random_ratio(1, WRITE_ONE_IN) => LockKind::Write,
            Lock::ReadWrite => LockKind::Read,
            Lock::Election => LockKind::Leader,
        }
    }

    /// What the run's last step takes, all of it at once, to show that
    /// nothing was left held: every permit of a semaphore, the write side
    /// of a read-write lock (no reader and no writer may be left), the
    /// mutex, the leadership.
    pub fn whole(self) -> (LockKind, u32) {
        match self {
            Lock::Mutex => (LockKind::Exclusive, 1),
            Lock::Semaphore { permits } => (LockKind::permit(permits), permits),
            Lock::ReadWrite => (LockKind::Write, 1),
            Lock::Election => (LockKind::Leader, 1),
        }
    }

    /// Whether its holders use the fenced register. A semaphore's do not:
    /// its `N` holders share the resource, and a register cannot tell a
    /// stale one from one of the `N − 1` others by its token.
    pub const fn fenced(self) -> bool {
        !matches!(self, Lock::Semaphore { .. })
    }
}

impl fmt::Display for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lock::Mutex => f.write_str("mutex"),
            Lock::Semaphore { permits: 1 } => f.write_str("semaphore of 1 permit"),
            Lock::Semaphore { permits } => write!(f, "semaphore of {permits} permits"),
            Lock::ReadWrite => f.write_str("read-write lock"),
            Lock::Election => f.write_str("election"),
        }
    }
}

/// A grant's kind as its history line ends: nothing for the mutex (whose
/// lines predate the other kinds), `permit/N`, `read`, `write` or
/// `leader`.
pub fn kind_word(kind: LockKind) -> Option<String> {
    match kind {
        LockKind::Permit { permits } => Some(format!("permit/{permits}")),
        LockKind::Read => Some("read".to_owned()),
        LockKind::Write => Some("write".to_owned()),
        LockKind::Leader => Some("leader".to_owned()),
        _ => None,
    }
}

/// The kind from [`kind_word`]'s word.
pub fn parse_kind(word: Option<&str>) -> Option<LockKind> {
    match word {
        None => Some(LockKind::Exclusive),
        Some("read") => Some(LockKind::Read),
        Some("write") => Some(LockKind::Write),
        Some("leader") => Some(LockKind::Leader),
        Some(w) => w
            .strip_prefix("permit/")?
            .parse()
            .ok()
            .map(LockKind::permit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_and_kinds_survive_their_words() {
        for lock in [
            Lock::Mutex,
            Lock::Semaphore { permits: 3 },
            Lock::ReadWrite,
            Lock::Election,
        ] {
            assert_eq!(Lock::from_arg(&lock.to_arg()), Ok(lock));
        }
        assert!(Lock::from_arg("semaphore/0").is_err());
        assert!(Lock::from_arg("rw").is_err());
        for kind in [
            LockKind::Exclusive,
            LockKind::permit(2),
            LockKind::Read,
            LockKind::Write,
            LockKind::Leader,
        ] {
            assert_eq!(parse_kind(kind_word(kind).as_deref()), Some(kind));
        }
        assert_eq!(parse_kind(Some("permit/x")), None);
    }

    #[test]
    fn a_read_write_lock_both_reads_and_writes() {
        let mut rng = rand::rng();
        let kinds: Vec<LockKind> = (0..300)
            .map(|_| Lock::ReadWrite.next_kind(&mut rng))
            .collect();
        assert!(kinds.contains(&LockKind::Read));
        assert!(kinds.contains(&LockKind::Write));
    }
}
