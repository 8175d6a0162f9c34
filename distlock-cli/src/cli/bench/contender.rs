//! What a workload drives: anything that can wait for a named lock (or lead
//! an election) and give it back. The library, each backend's floor and each
//! peer are one of these, so every workload is written once and runs the
//! same way on all of them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::backend::{acquire_kind, acquire_lease, async_trait};
use distlock::{AcquireOptions, Error, LeaderGuard, LockGuard, LockKind, Locker, Result, Wait};
use serde::Serialize;

use super::counting::Counting;

/// Which side of the comparison a contender is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    /// distlock itself: `Locker::lock_with` and `LockGuard::release`.
    Library,
    /// The backend's bare primitive with a naive retry loop.
    Floor,
    /// Another crate's lock, measured for comparison.
    Peer,
}

/// A contender as the report names it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Subject {
    pub(crate) role: Role,
    /// A short column heading: `library`, `floor`, or the peer's name.
    pub(crate) name: String,
    /// What exactly runs, in a sentence.
    pub(crate) detail: String,
}

/// What a contender's waiters did, where it can count it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wakeups {
    /// Attempts that found the lock held.
    pub(crate) busy_attempts: Option<u64>,
    /// Release notices delivered to waiters in this process.
    pub(crate) notices: Option<u64>,
}

/// A lock that a contender holds.
#[async_trait]
pub(crate) trait Held: Send {
    /// Gives the lock back.
    async fn release(self: Box<Self>) -> Result<()>;
}

/// Waits for named locks and gives them back.
#[async_trait]
pub(crate) trait Contender: Send + Sync {
    /// Who this is.
    fn subject(&self) -> Subject;

    /// Waits for `name` until `until`; `Ok(None)` if it was not granted by
    /// then.
    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>>;

    /// Waits for one of `permits` permits of the semaphore `name` until
    /// `until`; `Ok(None)` if none was granted by then. Peers have none:
    /// the semaphore workload runs the library against the floor only.
    async fn acquire_permit(
        &self,
        name: &str,
        permits: u32,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        let _ = (name, permits, until);
        Err(Error::unsupported("a benchmark peer", "semaphores"))
    }

    /// Waits for the read side of the read-write lock `name` (the write
    /// side when `write`) until `until`; `Ok(None)` if not granted by then.
    /// `client` is the asking client's index: the floor, which has no
    /// read-write lock, takes a name of that client's own instead. Peers
    /// have none.
    async fn acquire_side(
        &self,
        name: &str,
        client: usize,
        write: bool,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        let _ = (name, client, write, until);
        Err(Error::unsupported("a benchmark peer", "read-write locks"))
    }

    /// Campaigns in the election `name` until `until`: `Ok(None)` if it
    /// did not lead by then. Only the library, the floor (its bare lock:
    /// whoever holds the name leads) and the election peers campaign.
    async fn campaign(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        let _ = (name, until);
        Err(Error::unsupported("a benchmark peer", "elections"))
    }

    /// Takes the lead of the election `name` (waiting until `until` at
    /// most) on a lease of `ttl` that nothing renews or releases: a leader
    /// that died on the spot. Returns the TTL the lease was granted with
    /// (a server may round it up), or `None` where a lease left alone does
    /// not expire in this process (a ZooKeeper session's ephemeral node).
    async fn abandoned_lead(
        &self,
        name: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<Duration>> {
        let _ = (name, ttl, until);
        Ok(None)
    }

    /// Counters of the waiting done so far; the workloads take differences.
    fn wakeups(&self) -> Wakeups {
        Wakeups::default()
    }
}

/// What the library's candidates proclaim.
const CANDIDATE: &str = "distlock-bench";

/// The library as an application uses it.
pub(crate) struct Library {
    locker: Locker,
    counting: Option<Arc<Counting>>,
    /// Whether the backend's own count of waiters it woke
    /// ([`BackendStats::wakeups`](distlock::BackendStats)) is reported: for
    /// backends that wait on the server and so cannot be wrapped in
    /// [`Counting`].
    notices: bool,
}

impl Library {
    pub(crate) fn new(locker: Locker) -> Self {
        Self {
            locker,
            counting: None,
            notices: false,
        }
    }

    /// The library on a backend that waits on the server, with the
    /// wake-ups its [`stats`](Locker::stats) count.
    pub(crate) fn with_notices(locker: Locker) -> Self {
        Self {
            locker,
            counting: None,
            notices: true,
        }
    }

    /// The same library over a [`Counting`] wrapper of its backend, for the
    /// wake-ups workload only: the wrapper costs a little on every call.
    pub(crate) fn counted(locker: &Locker) -> Self {
        let counting = Arc::new(Counting::new(locker.backend().clone()));
        Self {
            locker: Locker::from_arc(counting.clone()).with_defaults(locker.defaults()),
            counting: Some(counting),
            notices: false,
        }
    }

    fn options(&self, wait: Duration) -> AcquireOptions {
        self.locker.defaults().wait(Wait::For(wait))
    }

    async fn lock(
        &self,
        name: &str,
        kind: LockKind,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        let wait = until.saturating_duration_since(Instant::now());
        match acquire_kind(&self.locker, name, kind, self.options(wait)).await {
            Ok(guard) => Ok(Some(Box::new(guard))),
            Err(Error::WaitTimeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl Contender for Library {
    fn subject(&self) -> Subject {
        Subject {
            role: Role::Library,
            name: "library".to_owned(),
            detail: if self.notices {
                "distlock: Locker::lock_with (waits the backend's way: woken by the server's \
                 notifications or watches), a renewing LockGuard, then LockGuard::release"
            } else {
                "distlock: Locker::lock_with (waits by polling with backoff, woken by \
                 in-process releases), a renewing LockGuard, then LockGuard::release"
            }
            .to_owned(),
        }
    }

    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        self.lock(name, LockKind::Exclusive, until).await
    }

    async fn acquire_permit(
        &self,
        name: &str,
        permits: u32,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        self.lock(name, LockKind::permit(permits), until).await
    }

    async fn acquire_side(
        &self,
        name: &str,
        _client: usize,
        write: bool,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        let kind = if write {
            LockKind::Write
        } else {
            LockKind::Read
        };
        self.lock(name, kind, until).await
    }

    async fn campaign(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        let wait = until.saturating_duration_since(Instant::now());
        let election = self.locker.election(name);
        match election.campaign_with(CANDIDATE, self.options(wait)).await {
            Ok(leading) => Ok(Some(Box::new(leading))),
            Err(Error::WaitTimeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn abandoned_lead(
        &self,
        name: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<Duration>> {
        let wait = until.saturating_duration_since(Instant::now());
        let opts = self.options(wait).ttl(ttl);
        // A bare lease, dropped here: no guard renews it and nobody
        // releases it, as if its holder had been killed.
        acquire_lease(&self.locker, name, LockKind::Leader, opts).await?;
        Ok(Some(ttl))
    }

    fn wakeups(&self) -> Wakeups {
        if self.notices {
            return Wakeups {
                busy_attempts: None,
                notices: Some(self.locker.stats().wakeups),
            };
        }
        self.counting
            .as_ref()
            .map_or_else(Wakeups::default, |c| Wakeups {
                busy_attempts: Some(c.busy_attempts()),
                notices: Some(c.notices()),
            })
    }
}

#[async_trait]
impl Held for LockGuard {
    async fn release(self: Box<Self>) -> Result<()> {
        LockGuard::release(*self).await
    }
}

#[async_trait]
impl Held for LeaderGuard {
    async fn release(self: Box<Self>) -> Result<()> {
        LeaderGuard::resign(*self).await
    }
}
