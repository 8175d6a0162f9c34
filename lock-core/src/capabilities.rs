//! What a backend guarantees, declared rather than guessed.

use std::time::Duration;

use crate::kind::{Family, LockKind};

/// How far a backend's fencing tokens can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fencing {
    /// Every grant of a name gets a token strictly greater than every earlier
    /// grant of that name, across restarts of the server.
    Strict,
    /// Tokens increase in normal operation but can repeat or go backwards
    /// after a failure the backend cannot see (eviction, a restart without
    /// persistence, a failover to a replica that missed the last grant);
    /// the backend's README says which.
    BestEffort,
    /// No usable token; [`Lease::token`](crate::Lease::token) carries no order.
    None,
}

/// The honest facts about one backend.
///
/// Build one with [`Capabilities::new`] and the `with_*` methods; the fields
/// can be read directly.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// A short name for messages: `"sqlite"`, `"redis"`, ….
    pub backend: &'static str,
    /// How trustworthy the fencing tokens are.
    pub fencing: Fencing,
    /// Whether a release wakes a waiter at once (watch, pub/sub, notify), as
    /// opposed to waiters noticing at their next poll.
    pub server_side_wait: bool,
    /// Whether waiters are granted the lock in the order they asked.
    pub fifo: bool,
    /// Whether the store runs one write at a time (SQLite): an attempt that
    /// can only fail then holds up the holder's release. A
    /// [`Locker`](crate::Locker)'s waiter then makes no attempt while a
    /// guard of the same locker holds the name, but tries as soon as it
    /// lets go.
    pub serial_writes: bool,
    /// Whether the server runs this client's requests in the order they
    /// were started: a request started after another was first polled runs
    /// after it (one pipelined connection per server: Redis, Redlock).
    /// A [`Locker`](crate::Locker)'s waiter then makes no attempt while a
    /// guard of the same locker holds the name, and tries as soon as that
    /// guard's release is on its way: its attempt runs right behind the
    /// release, and the hand-off costs one round trip.
    pub ordered_requests: bool,
    /// Whether the lock service keeps working when one server node is lost.
    pub survives_node_loss: bool,
    /// Whether clients in different processes (or hosts) exclude each other.
    /// Only the in-memory backend says no.
    pub shared_across_processes: bool,
    /// Whether the backend keeps semaphores ([`LockKind::Permit`]).
    pub semaphores: bool,
    /// Whether the backend keeps read-write locks ([`LockKind::Read`],
    /// [`LockKind::Write`]).
    pub read_write: bool,
    /// Whether the backend keeps elections ([`LockKind::Leader`]).
    pub elections: bool,
    /// The shortest TTL the backend can keep.
    pub min_ttl: Duration,
    /// The longest TTL the backend accepts.
    pub max_ttl: Duration,
}

impl Capabilities {
    /// The shortest TTL any backend accepts unless it says otherwise.
    pub const DEFAULT_MIN_TTL: Duration = Duration::from_millis(10);
    /// The longest TTL any backend accepts unless it says otherwise: a lease
    /// longer than a day is almost always a mistake that would keep a crashed
    /// holder's lock for that long.
    pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(24 * 3600);

    /// Capabilities of a backend with the given fencing, no server-side
    /// waiting, no FIFO order, a single node, shared across processes, and the
    /// default TTL bounds.
    pub const fn new(backend: &'static str, fencing: Fencing) -> Self {
        Self {
            backend,
            fencing,
            server_side_wait: false,
            fifo: false,
            serial_writes: false,
            ordered_requests: false,
            survives_node_loss: false,
            shared_across_processes: true,
            semaphores: false,
            read_write: false,
            elections: false,
            min_ttl: Self::DEFAULT_MIN_TTL,
            max_ttl: Self::DEFAULT_MAX_TTL,
        }
    }

    /// Sets [`Capabilities::server_side_wait`].
    pub const fn with_server_side_wait(mut self, yes: bool) -> Self {
        self.server_side_wait = yes;
        self
    }

    /// Sets [`Capabilities::fifo`].
    pub const fn with_fifo(mut self, yes: bool) -> Self {
        self.fifo = yes;
        self
    }

    /// Sets [`Capabilities::serial_writes`].
    pub const fn with_serial_writes(mut self, yes: bool) -> Self {
        self.serial_writes = yes;
        self
    }

    /// Sets [`Capabilities::ordered_requests`].
    pub const fn with_ordered_requests(mut self, yes: bool) -> Self {
        self.ordered_requests = yes;
        self
    }

    /// Sets [`Capabilities::survives_node_loss`].
    pub const fn with_survives_node_loss(mut self, yes: bool) -> Self {
        self.survives_node_loss = yes;
        self
    }

    /// Sets [`Capabilities::shared_across_processes`].
    pub const fn with_shared_across_processes(mut self, yes: bool) -> Self {
        self.shared_across_processes = yes;
        self
    }

    /// Sets [`Capabilities::semaphores`].
    pub const fn with_semaphores(mut self, yes: bool) -> Self {
        self.semaphores = yes;
        self
    }

    /// Sets [`Capabilities::read_write`].
    pub const fn with_read_write(mut self, yes: bool) -> Self {
        self.read_write = yes;
        self
    }

    /// Sets [`Capabilities::elections`].
    pub const fn with_elections(mut self, yes: bool) -> Self {
        self.elections = yes;
        self
    }

    /// Whether the backend keeps locks of `kind`'s family.
    pub const fn supports(&self, kind: LockKind) -> bool {
        match kind.family() {
            Family::Mutex => true,
            Family::Semaphore => self.semaphores,
            Family::ReadWrite => self.read_write,
            Family::Election => self.elections,
        }
    }

    /// Checks that the backend keeps locks of `kind`'s family and that the
    /// kind's own parameters are sound: [`Error::Unsupported`](crate::Error::Unsupported)
    /// or [`Error::InvalidPermits`](crate::Error::InvalidPermits) before any I/O.
    pub fn check_kind(&self, kind: LockKind) -> crate::Result<()> {
        kind.check()?;
        if !self.supports(kind) {
            return Err(crate::Error::Unsupported {
                backend: self.backend,
                operation: kind.family().operation(),
            });
        }
        Ok(())
    }

    /// A lock queue kept by a consensus service (etcd, ZooKeeper): strict
    /// fencing, waiters woken by the server in the order they queued, and
    /// the loss of a minority of members survived; TTLs from `min_ttl` to
    /// [`DEFAULT_MAX_TTL`](Self::DEFAULT_MAX_TTL).
    pub const fn consensus_queue(backend: &'static str, min_ttl: Duration) -> Self {
        Self::new(backend, Fencing::Strict)
            .with_server_side_wait(true)
            .with_fifo(true)
            .with_survives_node_loss(true)
            .with_ttl_range(min_ttl, Self::DEFAULT_MAX_TTL)
    }

    /// Sets the TTL bounds.
    pub const fn with_ttl_range(mut self, min: Duration, max: Duration) -> Self {
        self.min_ttl = min;
        self.max_ttl = max;
        self
    }

    /// Checks `ttl` against the bounds.
    pub fn check_ttl(&self, ttl: Duration) -> crate::Result<()> {
        if ttl < self.min_ttl || ttl > self.max_ttl {
            return Err(crate::Error::InvalidTtl {
                ttl,
                min: self.min_ttl,
                max: self.max_ttl,
                backend: self.backend,
            });
        }
        Ok(())
    }
}
