//! [`EtcdBackend`]: its constructors, and the [`LockBackend`] impl over the
//! queue protocol in `queue.rs`, for every kind of lock: the mutex, the
//! read-write lock and an election are lines of that queue; a semaphore's
//! lease keys are one line admitting `N` (`semaphore.rs`); an election's
//! value, leader and watch are in `election.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp};
use lock_core::backend::{
    AcquireRequest, BackendStats, Holder, Leader, Lease, LockBackend, WaitBudget, async_trait,
};
use lock_core::{Capabilities, Error, LockKind, LockName, Result};

use crate::EtcdConfig;
use crate::client::Core;
use crate::config::Settings;
use crate::handover::{release_and_hand_over, release_permit};
use crate::mark::Mark;
use crate::queue::Queue;
use crate::session::still_ours;

/// etcd grants leases in whole seconds and never shorter than its minimum,
/// 1.5 × the election timeout rounded up: 2 s with the default 1 s election
/// timeout. Shorter TTLs are refused rather than silently lengthened.
pub const MIN_TTL: Duration = Duration::from_secs(2);

const CAPABILITIES: Capabilities = Capabilities::consensus_queue(crate::NAME, MIN_TTL)
    .with_semaphores(true)
    .with_read_write(true)
    .with_elections(true);

/// A lock backend on an etcd cluster (see the crate docs).
#[derive(Clone)]
pub struct EtcdBackend {
    queue: Queue,
}

impl EtcdBackend {
    /// Connects to the cluster an `etcd://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(EtcdConfig::from_url(url)?).await
    }

    /// Connects to the cluster `config` names; see [`connect`](Self::connect).
    /// `config` is checked first: a mistake is an [`Error::InvalidConfig`]
    /// naming the option.
    pub async fn connect_with(config: EtcdConfig) -> Result<Self> {
        let settings = config.check()?;
        let started = tokio::time::Instant::now();
        // A failed TLS handshake shows either here, when the client opens
        // its connection at once, or at the first request: both are
        // explained the same way.
        let client = match crate::client::connect(&config).await {
            Ok(client) => client,
            Err(e) => return Err(crate::probe::explain(&config, started, e).await),
        };
        match Self::start(client, settings).await {
            Err(e) => Err(crate::probe::explain(&config, started, e).await),
            started => started,
        }
    }

    /// A backend on the cluster an `etcd_client::Client` of the
    /// application's reaches. Of `config` it uses the
    /// [`prefix`](EtcdConfig::prefix) and the [`timeout`](EtcdConfig::timeout)
    /// only: the endpoints, credentials, TLS and connect timeout are the
    /// client's own, and those fields are ignored (though checked, as every
    /// field is). Every request goes through clones of that client (they
    /// share its connections), each bounded by that timeout; the session
    /// leases are the backend's own, granted and kept alive by it, and
    /// never those of other users of the client.
    ///
    /// Connect the client with a keep-alive (`ConnectOptions::with_keep_alive`,
    /// as [`connect`](Self::connect) does) so that a connection to a member
    /// that died unannounced is noticed.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_etcd::{EtcdBackend, EtcdConfig};
    ///
    /// let client = etcd_client::Client::connect(["127.0.0.1:2379"], None).await.unwrap();
    /// let backend = EtcdBackend::from_client(client.clone(), EtcdConfig::default().prefix("app")).await?;
    /// let locker = Locker::new(backend);
    /// let guard = locker.lock("schema-migration").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: Client, config: EtcdConfig) -> Result<Self> {
        Self::start(client, config.check()?).await
    }

    /// The backend on `client`, once the cluster has answered.
    async fn start(client: Client, settings: Settings) -> Result<Self> {
        let backend = Self {
            queue: Queue::new(Core::new(client, settings)),
        };
        // The client connects lazily; make an unreachable cluster fail here.
        backend
            .queue
            .core
            .call("connect", |mut c| async move { c.status().await })
            .await?;
        Ok(backend)
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// `wakeups`: watch events that woke a waiter: one per release with FIFO
    /// waiters, since each waiter watches only its predecessor; about one
    /// per release of a permit, which wakes the semaphore's first waiter,
    /// plus one when its grant wakes the waiter behind it.
    fn stats(&self) -> BackendStats {
        BackendStats::default().with_wakeups(self.queue.wakeups.load(Ordering::Relaxed))
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        self.queue.try_acquire(req).await
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        self.queue.acquire(req, budget).await
    }

    /// Extends the lock by keeping its session's lease alive (one
    /// keep-alive shared by every lock on the session that renews at about
    /// the same time), and reads our key in parallel: 1 round trip. The
    /// deadline counts from the keep-alive's send time, or the younger
    /// proof it shared; etcd renews a lease to the TTL it was granted with,
    /// whatever `ttl` asks.
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let _ = ttl;
        // The session is the one this client granted the lock on: a lease
        // it did not grant (or one whose session it knows gone or expired)
        // is not renewed, so a renewal never keeps anybody else's lease alive.
        let queue = &self.queue;
        let session = queue
            .session_of(lease)
            .ok_or_else(|| Error::not_held(lease.name()))?;
        let key = queue
            .layout
            .held_key(lease.name(), lease.owner(), lease.kind());
        let key_of_lease = key.clone();
        let (alive, mine) = tokio::join!(
            queue
                .sessions
                .prove_alive(&session, session.renew_after() / 2),
            queue.core.call(
                "check our key",
                |mut c| async move { c.get(key, None).await }
            )
        );
        let token = lease.token().to_i64();
        let ours = still_ours(&mine?, token, session.id);
        if !alive? || !ours {
            return Err(Error::not_held(lease.name()));
        }
        let renewed = lease.renewed(lease.ttl(), session.proven());
        if !session.extend(&key_of_lease, token, renewed.deadline()) {
            return Err(Error::not_held(lease.name()));
        }
        Ok(renewed)
    }

    /// Our key is there with our fencing token as its create revision: a
    /// key lives only as long as its session's lease, so the server has not
    /// expired it. The read is linearizable, so a cut-off member cannot
    /// answer it from its stale state.
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let key = self
            .queue
            .layout
            .held_key(lease.name(), lease.owner(), lease.kind());
        let found = self
            .queue
            .core
            .call(
                "check our key",
                |mut c| async move { c.get(key, None).await },
            )
            .await?;
        let token = lease.token().to_i64();
        Ok(found
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == token))
    }

    /// One `Txn` deleting our key if its create revision is still our
    /// fencing token: the key and the token name this grant alone, so the
    /// next holder's key is never touched, and the session's lease, shared
    /// with this client's other locks, is left alone. A key that is gone
    /// (expired with the session, or deleted) is [`Error::NotHeld`].
    ///
    /// The mutex and a writer hand over to the waiter behind (`handover.rs`):
    /// theirs was the oldest key; a permit to the semaphore's first waiter,
    /// whose keys ahead it was among. A reader's release does not (older
    /// readers may hold).
    async fn release(&self, lease: &Lease) -> Result<()> {
        let queue = &self.queue;
        let key = queue
            .layout
            .held_key(lease.name(), lease.owner(), lease.kind());
        let token = lease.token().to_i64();
        let deleted = if lease.kind().is_exclusive() {
            release_and_hand_over(&queue.core, &queue.handovers, &key, token).await?
        } else if let LockKind::Permit { .. } = lease.kind() {
            release_permit(&queue.core, &queue.permit_handovers, &key, token).await?
        } else {
            let compare = Compare::create_revision(key.as_str(), CompareOp::Equal, token);
            queue.core.delete_if(&key, compare).await?
        };
        if let Some(session) = queue.session_of(lease) {
            session.forget(&key);
        }
        if deleted {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    /// Deletes every key of `req`'s owner in `req`'s family (a semaphore's
    /// lease key; a read-write lock's keys of both sides), each only if its value is still the
    /// owner's token (an election candidate's key, whose value is what it
    /// proclaims, by its name, which ends in that whole token).
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        let keys = self.queue.layout.family_keys(req);
        self.queue
            .sessions
            .leave_or_orphan(&keys, &Mark::of(req), req.ttl)
            .await
    }

    /// The mutex's and the election's holder of a name are one: the
    /// oldest key of its range, whoever put it (`etcdctl lock` or `elect`
    /// too), listed with the kind it was taken as.
    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        self.queue.holders(name, kind).await
    }

    /// One `Txn`: the leader's key gets `value` if its create revision is
    /// still the term, keeping its lease, as etcd's `Election.Proclaim`.
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        self.queue.proclaim(lease, value).await
    }

    /// The oldest key of the name's range (the mutex's, shared with
    /// `etcdctl elect`), its value and create revision, and the time left
    /// on its lease: 2 round trips.
    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        self.queue.leader(name).await
    }

    /// A watch of the name's range: returns on the first event after a
    /// read that can change the leader.
    async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        self.queue.leader_changed(name, seen, within).await
    }
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("settings", &self.queue.core.settings)
            .finish_non_exhaustive()
    }
}
