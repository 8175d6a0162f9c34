//! [`ZkBackend`]: its constructors, and the [`LockBackend`] impl over the
//! session's [`Core`]: a grant is our node admitted by its family's rule
//! (first in the mutex's queue, no writer before a reader, a lease among
//! the first permits), fenced by its czxid (see the crate docs).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Family;
use lock_core::backend::{
    AcquireRequest, BackendStats, Backoff, Holder, Leader, Lease, LockBackend, Retry, WaitBudget,
    async_trait,
};
use lock_core::{Capabilities, Error, LockKind, LockName, Result};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use lock_core::tls::TlsOptions;

use crate::ZkConfig;
use crate::cleanup::RETRY_CAP;
use crate::error::convert;
use crate::expiry::{Kept, czxid_of};
use crate::layout::{Queue, Rule};
use crate::node::Node;
use crate::session::{Core, connected, lease_ttl, session_ended};

/// A lock backend on a ZooKeeper ensemble (see the crate docs).
///
/// One backend is one ZooKeeper session, shared by every lock it takes. Cheap
/// to clone; clones share the session.
#[derive(Clone)]
pub struct ZkBackend {
    core: Arc<Core>,
}

impl ZkBackend {
    /// Connects to the ensemble a `zk://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(ZkConfig::from_url(url)?).await
    }

    /// Connects with a configuration built or adjusted by hand. `config` is
    /// checked first: a mistake is an [`Error::InvalidConfig`] naming the
    /// option.
    pub async fn connect_with(config: ZkConfig) -> Result<Self> {
        let backend = Self::unconnected(config.check()?);
        backend.core.client().await?;
        Ok(backend)
    }

    /// A backend on the session of a `zookeeper_client::Client` the
    /// application made. Of `config` it uses the
    /// [`chroot`](ZkConfig::chroot), [`timeout`](ZkConfig::timeout),
    /// [`creator_only`](ZkConfig::creator_only) and
    /// [`container_parents`](ZkConfig::container_parents) only: the hosts,
    /// session timeout, digest credentials, connect timeout and TLS are the
    /// client's own, and those fields are ignored (though checked, as every
    /// field is). Set `creator_only` for a client that authenticated, to
    /// give the nodes the creator-only ACL a URL with `auth` gives them.
    ///
    /// The session stays the application's: locks are ephemeral nodes of
    /// it, it is watched as the backend's own would be (a lease is at risk
    /// while it is disconnected, and lost when it expires), and closing it
    /// ends them. Requests go through clones of the client, each bounded by
    /// the timeout. The client may have a chroot: the config's chroot is
    /// below it.
    ///
    /// The backend cannot replace the session when it expires, as a
    /// backend made from a URL does (the client cannot say how to reach
    /// the ensemble again, nor with which credentials): every lock of the
    /// backend is then lost, and every later call fails with an error that
    /// says so. Make a new client and a new backend then. A session that
    /// has ended already is refused.
    ///
    /// [`config`](Self::config) then holds the fields used, no hosts, no
    /// credentials, and the session's timeout.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_zk::{ZkBackend, ZkConfig};
    ///
    /// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await.unwrap();
    /// let backend = ZkBackend::from_client(client.clone(), ZkConfig::default().chroot("/app")).await?;
    /// let locker = Locker::new(backend);
    /// let guard = locker.lock("schema-migration").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: zk::Client, config: ZkConfig) -> Result<Self> {
        let checked = config.check()?;
        let state = client.state();
        if state.is_terminated() {
            return Err(session_ended(state));
        }
        let config = ZkConfig {
            hosts: Vec::new(),
            chroot: checked.chroot,
            session_timeout: client.session_timeout(),
            digest: None,
            creator_only: checked.creator_only,
            container_parents: checked.container_parents,
            timeout: checked.timeout,
            connect_timeout: checked.timeout,
            tls: TlsOptions::default(),
        };
        let backend = Self::with_session_rule(config, false);
        let client = backend.core.enter_chroot(client).await?;
        backend.core.set_session(client);
        Ok(backend)
    }

    /// A backend that makes its session on first use, from a checked
    /// `config`.
    fn unconnected(config: ZkConfig) -> Self {
        Self::with_session_rule(config, true)
    }

    fn with_session_rule(config: ZkConfig, own_sessions: bool) -> Self {
        Self {
            core: Arc::new(Core::new(config, own_sessions)),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &ZkConfig {
        &self.core.config
    }

    /// The current session's id, if there is a live one.
    pub fn session_id(&self) -> Option<i64> {
        self.core.live_client().map(|c| c.session_id().0)
    }

    /// The session timeout the server granted to the current session.
    pub fn session_timeout(&self) -> Option<Duration> {
        self.core.live_client().map(|c| c.session_timeout())
    }

    /// The longest a lease lasts without a renewal on the current session:
    /// `min(ttl, 2/3 of the session timeout)`. See the crate docs.
    pub fn lease_ttl(&self, ttl: Duration) -> Duration {
        match self.core.live_client() {
            Some(c) => lease_ttl(ttl, &c),
            None => ttl,
        }
    }
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.core.config)
            .field("session", &self.session_id().map(|id| format!("{id:#x}")))
            .finish_non_exhaustive()
    }
}

/// The shortest TTL accepted: a lease is renewed every third of its TTL, one
/// confirmation through the leader each time.
pub const MIN_TTL: Duration = Duration::from_millis(100);

const CAPABILITIES: Capabilities = Capabilities::consensus_queue(crate::NAME, MIN_TTL)
    .with_semaphores(true)
    .with_read_write(true)
    .with_elections(true);

#[async_trait]
impl LockBackend for ZkBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// `wakeups`: watch events that woke a waiter: a deletion of the node
    /// it watched (one per release when waiters queue, since each waiter
    /// watches only the node in its way), or a change of a semaphore's
    /// leases seen by the one acquirer that counts them.
    fn stats(&self) -> BackendStats {
        BackendStats::default()
            .with_wakeups(self.core.wakeups.load(std::sync::atomic::Ordering::Relaxed))
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        match self
            .acquire(
                req,
                &WaitBudget::new(lock_core::Wait::No, CancellationToken::new()),
            )
            .await
        {
            Ok(lease) => Ok(Some(lease)),
            Err(Error::Busy { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        if let Some(lease) = self.core.granted_before(req) {
            return Ok(lease);
        }
        if let LockKind::Permit { permits } = req.kind {
            return self.core.acquire_permit(req, permits, budget).await;
        }
        let queue = Queue::of_lease(&req.name, req.kind);
        let mut retry = Retry::new(crate::NAME, budget, Backoff::with_cap(RETRY_CAP));
        // Our node and the session it belongs to, once created.
        let mut queued: Option<(i64, Node)> = None;
        let outcome = loop {
            let attempt = async {
                let client = self.core.session_for(req, budget).await?;
                let look_first = retry.attempts() > 0;
                let (node, turn) = self
                    .core
                    .take_turn(&client, &queue, req, &mut queued, look_first, None, budget)
                    .await?;
                Ok::<_, Error>((client, node, turn.sent))
            };
            match attempt.await {
                Ok(granted) => break Ok(granted),
                // A lost connection, an election, an expired session: queue
                // again (idempotent: the same node if it survived) within
                // the budget.
                Err(e) => {
                    if let Err(e) = retry.after(e).await {
                        break Err(e);
                    }
                }
            }
        };
        match outcome {
            Ok((client, node, sent)) => Ok(self.core.grant(req, &client, &queue, &node, sent)),
            Err(e) => {
                self.core.give_up(req, &[(&queue, &queued)]).await;
                Err(e)
            }
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let owner = lease.owner().to_u128();
        let czxid = czxid_of(lease);
        let Some((path, session)) = self.core.in_force(owner, czxid) else {
            return Err(Error::not_held(lease.name()));
        };
        // Renewing never starts a new session: a lease lives and dies with
        // the session that took it.
        let client = match self.core.live_client() {
            Some(c) if c.session_id().0 == session => c,
            _ => return Err(Error::not_held(lease.name())),
        };
        connected(&client)?;
        // The lease runs from before the leader confirmed it.
        let sent = Instant::now();
        let mine = match self.core.confirm(&client, &path, czxid).await? {
            Ok(mine) => mine,
            Err(zk::Error::SessionExpired) => false,
            Err(e) => return Err(convert("renew", e)),
        };
        let ttl = lease_ttl(ttl, &client);
        if mine && self.core.extend(owner, czxid, ttl, sent) {
            Ok(lease.renewed(ttl, sent))
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let owner = lease.owner().to_u128();
        let czxid = czxid_of(lease);
        let forget = || self.core.forget_lease(owner, czxid);
        let kept = self.core.kept(owner, czxid);
        if let Some(Kept::Expired) = kept {
            return Err(Error::not_held(lease.name()));
        }
        let client = self.core.client().await?;
        connected(&client)?;
        let queue = Queue::of_lease(lease.name(), lease.kind());
        let Some((path, _)) = self.core.node_of(&client, &queue, lease, kept).await? else {
            forget();
            return Err(Error::not_held(lease.name()));
        };
        // Any version: nothing writes a lock node's data, so a version
        // would tell nothing more, and a node written by someone else must
        // still go. A mutex's holder hands its turn over; a read-write
        // lock's release cannot (a reader may release while other readers
        // before it still hold, a writer lets in every reader behind it),
        // so it lists the lock's nodes for its waiters instead. A lease's
        // release lists the leases for the semaphore's counter.
        let delete = async {
            match queue.rule {
                Rule::Count => self.core.delete_and_list_for_counter(&client, &path).await,
                _ if queue.has_sides() => self.core.delete_and_list_for_sides(&client, &path).await,
                _ => self.core.delete_and_hand_over(&client, &path).await,
            }
        };
        match self.core.call("release", delete).await? {
            Ok(()) => {
                forget();
                if let Some((parent, _)) = path.rsplit_once('/') {
                    self.core.tidy_parent(&client, parent).await;
                }
                Ok(())
            }
            Err(zk::Error::NoNode) => {
                forget();
                Err(Error::not_held(lease.name()))
            }
            Err(e) => Err(convert("release", e)),
        }
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let czxid = czxid_of(lease);
        let kept = self.core.kept(lease.owner().to_u128(), czxid);
        if let Some(Kept::Expired) = kept {
            return Ok(false);
        }
        let client = self.core.client().await?;
        connected(&client)?;
        let queue = Queue::of_lease(lease.name(), lease.kind());
        match self.core.node_of(&client, &queue, lease, kept).await? {
            None => Ok(false),
            // Found by a listing after a `sync`: it is there, whatever
            // session holds it, and a granted node that is still there
            // stays granted (nodes made since come after it; a lease is
            // never taken back).
            Some((_, false)) => Ok(true),
            // Ours on this session: confirmed by a write the leader commits.
            Some((path, true)) => match self.core.confirm(&client, &path, czxid).await? {
                Ok(mine) => Ok(mine),
                Err(zk::Error::SessionExpired) => Ok(false),
                Err(e) => Err(convert("check our node", e)),
            },
        }
    }

    /// Forgets `req`'s lease and deletes every node of its owner in the
    /// family: the mutex node, a semaphore's lease and mutex nodes, a
    /// read-write lock's node.
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.core.forget(req.owner.to_u128());
        self.core
            .leave(&req.name, req.kind.family(), req.owner)
            .await
    }

    /// Sets the data of the lease's node, checked to be the lease's own
    /// (its czxid) by the stat the write answers with; refused while a
    /// Curator latch is next in line (see the crate docs, Elections).
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        self.core.proclaim(lease, value).await
    }

    /// The first candidate node, read after a `sync`: a Curator latch's as
    /// well as distlock's.
    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        self.core.leader(name).await
    }

    /// A watch on the leader's node (or on the election's children while
    /// nobody leads): no poll.
    async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        self.core.leader_changed(name, seen, within).await
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        match kind.family() {
            Family::Mutex | Family::Election => Ok(self
                .core
                .first_holder(name, kind)
                .await?
                .into_iter()
                .collect()),
            _ => self.core.group_holders(name, kind).await,
        }
    }
}
