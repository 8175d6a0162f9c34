//! The keys of a lock name under the backend's prefix: the lock, its
//! fence counter, the mark that somebody waits, and the release channel
//! with the notices it carries.

use std::time::Duration;

use lock_core::backend::Family;
use lock_core::{LockKind, LockName};

/// The keys of one lock name under a prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    /// How long a failed attempt marks the name as waited on; zero for no
    /// mark.
    waiting_mark: Duration,
    /// Whether the name is a hash tag (`{name}`), so that every key of one
    /// lock lands in one cluster slot.
    tagged: bool,
}

impl Keys {
    /// Keys under `prefix` (e.g. `distlock:`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            waiting_mark: Self::WAITING_MARK,
            tagged: false,
        }
    }

    /// The same keys for a Redis Cluster: the name in each key is a hash
    /// tag, `prefix{name}`, `prefix{name}#fence`, `prefix{name}#waiting`,
    /// so the scripts touch one slot and stay atomic; and each name's
    /// releases are announced on a shard channel of that slot
    /// ([`Keys::release_channel`]).
    pub fn hash_tagged(self) -> Self {
        Self {
            tagged: true,
            ..self
        }
    }

    /// The name as it appears in keys: a hash tag in a cluster.
    fn key_name(&self, name: &LockName) -> String {
        if self.tagged {
            format!("{}{{{name}}}", self.prefix)
        } else {
            format!("{}{name}", self.prefix)
        }
    }

    /// The same keys for a client that nobody wakes by pub/sub (Redlock
    /// waits by retrying): failed attempts set no waiting mark, so they
    /// write nothing and releases publish nothing.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub fn without_waiting_mark(self) -> Self {
        Self {
            waiting_mark: Duration::ZERO,
            ..self
        }
    }

    /// The lock key: the prefix and the name, holding only the owner token.
    pub fn lock(&self, name: &LockName) -> String {
        self.key_name(name)
    }

    /// The keys of `name`'s mutex, or of its election (`kind`
    /// [`LockKind::Leader`]), which is a mutex of its own family: the same
    /// keys behind `#elect`, and one more for the leader's value.
    pub fn mutex(&self, name: &LockName, kind: LockKind) -> MutexKeys {
        let leader = kind.family() == Family::Election;
        let lock = if leader {
            format!("{}#{}", self.key_name(name), Family::Election.tag())
        } else {
            self.key_name(name)
        };
        MutexKeys {
            // `#` is not allowed in lock names, so no lock key can ever be
            // somebody's fence, mark or value.
            fence: format!("{lock}#fence"),
            waiting: format!("{lock}#waiting"),
            value: leader.then(|| format!("{lock}#value")),
            lock,
        }
    }

    /// How long one failed attempt marks a name as waited on: longer than a
    /// waiter's longest pause between attempts, which renews it.
    pub const WAITING_MARK: Duration = Duration::from_secs(2);

    /// How long a failed attempt marks a name as waited on here (zero: no
    /// mark, see [`Keys::without_waiting_mark`]).
    pub fn waiting_mark(&self) -> Duration {
        self.waiting_mark
    }

    /// Whether changes are announced on the release channel: not for a
    /// client that nobody wakes by pub/sub (see
    /// [`Keys::without_waiting_mark`]).
    pub fn announces(&self) -> bool {
        !self.waiting_mark.is_zero()
    }

    /// The pub/sub channel on which releases are announced, name as payload.
    pub fn channel(&self) -> String {
        format!("{}released", self.prefix)
    }

    /// Where a release of `name` is announced, and with which command: the
    /// one [`Keys::channel`] by `PUBLISH` on one server; in a cluster, a
    /// shard channel of the lock's own slot by `SPUBLISH`, which only the
    /// nodes serving that slot carry, where `PUBLISH` would go to every
    /// node of the cluster.
    pub fn release_channel(&self, name: &LockName) -> (String, &'static str) {
        if self.tagged {
            (format!("{}#released", self.key_name(name)), "SPUBLISH")
        } else {
            (self.channel(), "PUBLISH")
        }
    }
}

/// Whether `kind` is kept as a mutex is, under [`Keys::mutex`]: the
/// mutex itself, or an election.
pub fn mutex_like(kind: LockKind) -> bool {
    matches!(kind.family(), Family::Mutex | Family::Election)
}

/// The keys of one mutex, or of one election: see [`Keys::mutex`].
#[derive(Clone, Debug)]
pub struct MutexKeys {
    /// The lock key, holding only the owner token.
    pub lock: String,
    /// The fence counter: the token of the latest grant.
    pub fence: String,
    /// Set by a failed attempt, for as long as [`Keys::WAITING_MARK`]:
    /// while it exists, a release is announced. Uncontended locks so
    /// publish nothing.
    pub waiting: String,
    /// An election's: the value the leader proclaims, with the lock key's
    /// TTL.
    pub value: Option<String>,
}

/// What a notice on the release channel tells, its payload being the lock
/// name behind a mark. Notices of other marks are ignored (an older
/// client ignores these too: a marked payload is not a lock name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notice {
    /// A release that admits one waiter: `NAME`.
    Released,
    /// A release that may admit every waiter (a read-write lock's):
    /// `*NAME`.
    ReleasedAll,
    /// A new leader or a new value, for the election's observers:
    /// `!NAME`.
    Elected,
    /// A leader gone, for the observers and one waiting candidate:
    /// `~NAME`.
    Resigned,
}

impl Notice {
    fn mark(self) -> &'static str {
        match self {
            Notice::Released => "",
            Notice::ReleasedAll => "*",
            Notice::Elected => "!",
            Notice::Resigned => "~",
        }
    }

    /// The notice's payload for `name`.
    pub(crate) fn payload(self, name: &LockName) -> String {
        format!("{}{name}", self.mark())
    }

    /// The notice a payload carries, and the name it is about.
    pub(crate) fn parse(payload: &str) -> (Notice, &str) {
        [Notice::ReleasedAll, Notice::Elected, Notice::Resigned]
            .into_iter()
            .find_map(|n| payload.strip_prefix(n.mark()).map(|name| (n, name)))
            .unwrap_or((Notice::Released, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_read_back_as_written() {
        let name = LockName::new("jobs:nightly-1").unwrap();
        for notice in [
            Notice::Released,
            Notice::ReleasedAll,
            Notice::Elected,
            Notice::Resigned,
        ] {
            assert_eq!(
                Notice::parse(&notice.payload(&name)),
                (notice, name.as_str())
            );
        }
    }

    #[test]
    fn an_election_has_keys_of_its_own_in_the_name_s_slot() {
        let name = LockName::new("n").unwrap();
        let keys = Keys::new("p:").hash_tagged();
        let mutex = keys.mutex(&name, LockKind::Exclusive);
        let election = keys.mutex(&name, LockKind::Leader);
        assert_eq!(
            (mutex.lock.as_str(), mutex.fence.as_str(), mutex.value),
            ("p:{n}", "p:{n}#fence", None)
        );
        assert_eq!(
            [election.lock, election.fence, election.waiting],
            ["p:{n}#elect", "p:{n}#elect#fence", "p:{n}#elect#waiting"]
        );
        assert_eq!(election.value.as_deref(), Some("p:{n}#elect#value"));
    }
}
