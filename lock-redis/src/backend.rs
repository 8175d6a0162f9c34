//! [`RedisBackend`]: the lock protocol on one Redis server.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    AcquireRequest, Admitted, BackendStats, Holder, Leader, Lease, LockBackend, OwnerToken,
    WaitBudget, Waking, async_trait, poll_acquire,
};
use lock_core::{Capabilities, Error, Fencing, FencingToken, LockKind, LockName, Result};
use redis::Client;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::sentinel::SentinelConfig;
use crate::config::{RedisConfig, Topology};
use crate::confirm::Confirmed;
use crate::conn::{cluster_client, open_cluster};
use crate::election;
use crate::eviction::Eviction;
use crate::group::{Joining, Left};
use crate::node::{Keys, Node, mutex_like};
use crate::notices::{self, Sharded, Wakers};

/// A cluster backend's name, as its capabilities give it (for metrics and
/// side-by-side benchmarks, where it is not one server).
const CLUSTER_NAME: &str = "redis-cluster";

/// With pub/sub wake-ups, polling is only a safety net.
const POLL_CAP: Duration = Duration::from_millis(500);

/// A lock backend on one Redis server (see the crate docs).
#[derive(Debug)]
pub struct RedisBackend {
    node: Node,
    /// With `wait_replicas`: the connections grants and renewals are
    /// confirmed on.
    confirm: Option<Confirmed>,
    capabilities: Capabilities,
    wakers: Arc<Wakers>,
    notices: Notices,
}

/// How releases reach this backend's waiters.
#[derive(Debug)]
enum Notices {
    /// One server: the task that forwards its one channel.
    Single(JoinHandle<()>),
    /// A cluster: shard channels, subscribed while somebody waits.
    Sharded(Arc<Sharded>),
}

impl RedisBackend {
    /// Every holder of a semaphore or read-write lock.
    async fn group_holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        let members = self.node.group_holders(name, kind.family()).await?;
        Ok(members
            .into_iter()
            .map(|(writer, owner, left, token)| {
                let side = match kind {
                    LockKind::Read | LockKind::Write if writer => LockKind::Write,
                    LockKind::Read | LockKind::Write => LockKind::Read,
                    _ => kind,
                };
                Holder::new(&owner, token, Some(left)).of_kind(side)
            })
            .collect())
    }

    /// Connects to the server a `redis://` or `rediss://` URL names and
    /// subscribes to release notices.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(RedisConfig::from_url(url)?).await
    }

    /// Connects to the server, cluster or master `config` names, once it
    /// passed its checks; see [`connect`](Self::connect).
    pub async fn connect_with(config: RedisConfig) -> Result<Self> {
        config.check()?;
        let keys = Keys::new(config.prefix.clone());
        let node = match &config.topology {
            Topology::Cluster(_) => return Self::connect_cluster(&config).await,
            Topology::Single(server) => Node::connect(server, &config, keys).await?,
            _ => {
                let sentinel = SentinelConfig::of(&config)?
                    .ok_or_else(|| Error::unsupported(crate::NAME, "this topology"))?;
                Node::connect_sentinel(
                    &sentinel,
                    config.timeout,
                    config.connect_timeout,
                    config.allow_eviction,
                    keys,
                )
                .await?
            }
        };
        Self::start(node, &config).await
    }

    /// A Redis Cluster through its seed nodes: commands through redis-rs's
    /// cluster client, release notices on shard channels.
    async fn connect_cluster(config: &RedisConfig) -> Result<Self> {
        let label = config.topology.label();
        let invalid = |e: redis::RedisError| Error::invalid_config(crate::NAME, e.to_string());
        let keys = Keys::new(config.prefix.clone()).hash_tagged();
        let client = cluster_client(config)?.build().map_err(invalid)?;
        let node = Node::connect_cluster(&client, config, keys.clone()).await?;
        let (pushes_in, pushes) = tokio::sync::mpsc::unbounded_channel();
        let subscriber = cluster_client(config)?
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes_in)
            .build()
            .map_err(invalid)?;
        let tls = config.tls.is_enabled();
        let conn = open_cluster(&subscriber, &label, config.connect_timeout, tls).await?;
        let wakers = Arc::new(Wakers::new(true));
        let sharded = Sharded::new(conn, pushes, keys, config.timeout, wakers.clone());
        Ok(Self {
            capabilities: Self::capabilities_of(CLUSTER_NAME, &node, false),
            node,
            confirm: None,
            wakers,
            notices: Notices::Sharded(Arc::new(sharded)),
        })
    }

    /// `confirmed`: whether every grant waits for the replicas
    /// (`wait_replicas`).
    fn capabilities_of(name: &'static str, node: &Node, confirmed: bool) -> Capabilities {
        let fencing = match node.eviction() {
            // Tokens stay ordered while lock keys may be evicted, since the
            // counter has no TTL; not once the counter itself may go.
            Eviction::AnyKey => Fencing::BestEffort,
            // A failover to a replica that missed the last grant leaves the
            // counter behind that grant's token, and the next token is then
            // the promoted replica's clock: ordered only while that clock is
            // not behind the old master's by more than the failover took.
            // With `wait_replicas` no token is handed out before the
            // replicas have its counter.
            _ if node.fails_over() && !confirmed => Fencing::BestEffort,
            Eviction::Never | Eviction::KeysWithTtl | Eviction::Unknown => Fencing::Strict,
        };
        // With `WAIT`, grants go out on a connection of their own.
        Capabilities::new(name, fencing)
            .with_server_side_wait(true)
            .with_ordered_requests(!confirmed)
            .with_semaphores(true)
            .with_read_write(true)
            .with_elections(true)
    }

    /// A backend on the server a `redis::Client` of the application's
    /// reaches, with `config`'s prefix, timeouts, eviction choice and
    /// [`wait_replicas`](RedisConfig::wait_replicas); its topology and TLS
    /// are the client's business and go unused. The backend opens its own
    /// connections from the client: a connection manager for the locks,
    /// the pub/sub connection that hears releases, and with `wait_replicas`
    /// the connection grants are confirmed on. Connections the application
    /// opened from the client are neither used nor disturbed.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_redis::{RedisBackend, RedisConfig};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/0").unwrap();
    /// let config = RedisConfig::default().prefix("billing:");
    /// let backend = RedisBackend::from_client(client.clone(), config).await?;
    /// let locker = Locker::new(backend);
    /// let guard = locker.lock("invoice-42").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: Client, config: RedisConfig) -> Result<Self> {
        config.check_options()?;
        let label = Node::label_of(&client);
        let node = Node::with_client(
            client,
            label,
            config.timeout,
            config.connect_timeout,
            config.allow_eviction,
            Keys::new(config.prefix.clone()),
        )
        .await?;
        Self::start(node, &config).await
    }

    /// The backend on a connected `node`: the confirming connection, if
    /// asked for, and the release subscription.
    async fn start(node: Node, config: &RedisConfig) -> Result<Self> {
        let confirm = match config.wait_replicas {
            0 => None,
            // Boxed: inline, it nests `from_client`'s future deeper than
            // the compiler looks by default (`recursion_limit`), and an
            // application awaiting `from_client` would not compile.
            replicas => {
                Some(Box::pin(Confirmed::open(&node, replicas, config.wait_timeout)).await?)
            }
        };
        let wakers = Arc::new(Wakers::new(confirm.is_none()));
        let to = node
            .subscribe_to()
            .ok_or_else(|| Error::backend("a backend on one server needs that server's client"))?;
        let subscriber = tokio::spawn(notices::forward(
            to,
            node.keys().channel(),
            config.connect_timeout,
            wakers.clone(),
        ));
        Ok(Self {
            capabilities: Self::capabilities_of(crate::NAME, &node, confirm.is_some()),
            node,
            confirm,
            wakers,
            notices: Notices::Single(subscriber),
        })
    }

    /// How a waiter for `req` learns it may go on: the release notices, and
    /// for a read-write lock a release in this process that admits it. Not with `wait_replicas`: a grant made by a release would
    /// not be confirmed on the replicas, so those waiters do not register.
    fn waking(&self, req: &AcquireRequest) -> Waking<'_> {
        let waking = Waking::signalled(&self.wakers.waiters).cap(POLL_CAP);
        if !admitted(req.kind) || !self.wakers.admitted {
            return waking;
        }
        waking.admitted_by(&self.wakers.admissions)
    }

    /// Leaves a group (see [`Node::leave`]) and hands their grants to the
    /// local waiters the release admitted; `true` if a live grant was
    /// removed.
    async fn leave(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        token: Option<FencingToken>,
    ) -> Result<bool> {
        let sent_at = Instant::now();
        let admit = self.wakers.admitted;
        let Left { live, admitted } = self.node.leave(name, kind, owner, token, admit).await?;
        for (owner, token) in admitted {
            let sent_at = Some(sent_at);
            self.wakers
                .admissions
                .admit(owner, Admitted { token, sent_at });
        }
        Ok(live)
    }

    /// Takes the lock and waits for the replicas to have it (see
    /// [`Confirmed::grant`]); gives it back unless they confirm, or when
    /// the answer was lost (the script may have run).
    async fn acquire_confirmed(
        &self,
        confirm: &Confirmed,
        req: &AcquireRequest,
    ) -> Result<Option<FencingToken>> {
        let error = match confirm.grant(req).await {
            Ok(token) => return Ok(token),
            Err(e) => e,
        };
        let _ = self.abandon(req).await;
        Err(error)
    }
}

/// Whether a waiter for `kind` registers to be admitted by a release (see
/// [`Joining`]).
fn admitted(kind: LockKind) -> bool {
    matches!(kind, LockKind::Read | LockKind::Write)
}

impl Drop for RedisBackend {
    fn drop(&mut self) {
        if let Notices::Single(subscriber) = &self.notices {
            subscriber.abort();
        }
    }
}

#[async_trait]
impl LockBackend for RedisBackend {
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    /// `wakeups`: release notices (pub/sub messages) delivered to local waiters.
    fn stats(&self) -> BackendStats {
        self.wakers.waiters.stats()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let sent = Instant::now();
        let token = match &self.confirm {
            Some(confirm) => self.acquire_confirmed(confirm, req).await?,
            None => {
                let joining = if admitted(req.kind) {
                    Joining::Admitted
                } else {
                    Joining::Unadmitted
                };
                self.node.grant_as(req, joining).await?
            }
        };
        Ok(token.map(|token| Lease::granted(req, token, sent)))
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        let Notices::Sharded(sharded) = &self.notices else {
            return poll_acquire(self, req, budget, self.waking(req)).await;
        };
        // In a cluster a waiter subscribes to its name's releases, which
        // costs a round trip: only once the lock was found held, and before
        // the next attempt, whose failure sets the waiting mark that makes
        // the release announce itself.
        budget.attempted();
        if let Some(lease) = self.try_acquire(req).await? {
            return Ok(lease);
        }
        if budget.is_over() {
            return Err(budget.exhausted(&req.name));
        }
        budget.waiting();
        let _watching = sharded.watch(&req.name, budget).await;
        poll_acquire(self, req, budget, self.waking(req)).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let sent = Instant::now();
        let renewed = match (&self.confirm, lease.kind()) {
            (Some(confirm), _) => confirm.renew(lease, ttl).await?,
            (None, kind) if mutex_like(kind) => self.node.renew(lease, ttl).await?,
            (None, _) => {
                self.node
                    .renew_member(lease, Some(lease.token()), ttl)
                    .await?
            }
        };
        if renewed {
            Ok(lease.renewed(ttl, sent))
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        match lease.kind() {
            kind if mutex_like(kind) => self.node.holds(lease.name(), kind, lease.owner()).await,
            _ => self.node.holds_member(lease, Some(lease.token())).await,
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let (name, owner) = (lease.name(), lease.owner());
        let released = match lease.kind() {
            kind if mutex_like(kind) => self.node.release(name, kind, owner).await?,
            kind => self.leave(name, kind, owner, Some(lease.token())).await?,
        };
        if released {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        match req.kind {
            kind if mutex_like(kind) => self.node.release(&req.name, kind, req.owner).await?,
            kind => self.leave(&req.name, kind, req.owner, None).await?,
        };
        Ok(())
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        if !mutex_like(kind) {
            return self.group_holders(name, kind).await;
        }
        let holder = self.node.holder(name, kind).await?;
        Ok(holder
            .map(|h| {
                Holder::new(&h.owner, FencingToken::new(h.counter), Some(h.remaining)).of_kind(kind)
            })
            .into_iter()
            .collect())
    }

    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        if self.node.proclaim(lease, value).await? {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        self.node.leader(name).await
    }

    /// Woken by the election's notices: its grants, proclaims and
    /// releases publish one each.
    async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        let sharded = match &self.notices {
            Notices::Sharded(sharded) => Some(sharded),
            Notices::Single(_) => None,
        };
        election::leader_changed(&self.node, &self.wakers, sharded, name, seen, within).await
    }
}
