//! The keys of a lock name under the backend's prefix: the lock, its
//! fence counter, the mark that somebody waits, and the release channel.

use std::time::Duration;

use lock_core::LockName;

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

    /// The fence counter. `#` is not allowed in lock names, so no lock key
    /// can ever be somebody's fence key.
    pub fn fence(&self, name: &LockName) -> String {
        format!("{}#fence", self.key_name(name))
    }

    /// Set by a failed attempt, for as long as [`Keys::WAITING_MARK`]: while
    /// it exists, a release of the name is announced. Uncontended locks so
    /// publish nothing.
    pub fn waiting(&self, name: &LockName) -> String {
        format!("{}#waiting", self.key_name(name))
    }

    /// How long one failed attempt marks a name as waited on: longer than a
    /// waiter's longest pause between attempts, which renews it.
    pub const WAITING_MARK: Duration = Duration::from_secs(2);

    /// How long a failed attempt marks a name as waited on here (zero: no
    /// mark, see [`Keys::without_waiting_mark`]).
    pub fn waiting_mark(&self) -> Duration {
        self.waiting_mark
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
