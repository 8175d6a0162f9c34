//! [`ZkBackend`]: the ZooKeeper lock recipe in Apache Curator's node layout
//! (the one `InterProcessMutex` uses), with czxid fencing.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lock_core::wait::Backoff;
use lock_core::{
    AcquireRequest, Capabilities, Error, Fencing, FencingToken, Holder, Lease, LockBackend,
    LockName, OwnerToken, Result, WaitBudget, async_trait,
};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::config::ZkConfig;

/// The shortest TTL accepted: a lease is renewed every third of its TTL, one
/// read each time.
pub const MIN_TTL: Duration = Duration::from_millis(100);

/// Lock parents live under this node, below the chroot: `/locks/<name>`.
pub const ROOT: &str = "/locks";

/// The lock name of Curator's `InterProcessMutex`: nodes are
/// `_c_<uuid>-lock-<sequence>`.
const LOCK_NAME: &str = "lock-";

/// Curator's protection prefix.
const PROTECTED: &str = "_c_";

/// Longest pause between retries of a failed wait or cleanup.
const RETRY_CAP: Duration = Duration::from_millis(500);

const CAPABILITIES: Capabilities = Capabilities::new("zookeeper", Fencing::Strict)
    .with_server_side_wait(true)
    .with_fifo(true)
    .with_survives_node_loss(true)
    .with_ttl_range(MIN_TTL, Capabilities::DEFAULT_MAX_TTL);

/// A lock backend on a ZooKeeper ensemble (see the crate docs).
///
/// One backend is one ZooKeeper session, shared by every lock it takes. Cheap
/// to clone; clones share the session.
#[derive(Clone)]
pub struct ZkBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: ZkConfig,
    /// The current session; replaced when it expires.
    session: Mutex<Option<zk::Client>>,
    /// Held while a new session is being made, so only one is.
    connecting: tokio::sync::Mutex<()>,
    /// Whether the server accepts container nodes (cleared on `Unimplemented`).
    containers: AtomicBool,
    /// Leases granted by this backend, by owner token, each with the task
    /// that deletes its node when it is not renewed in time.
    held: Mutex<HashMap<u128, Held>>,
    /// Owners whose create may have been applied without a reply.
    uncertain: Mutex<HashSet<u128>>,
    wakeups: AtomicU64,
}

/// One lease this backend granted and keeps.
struct Held {
    path: String,
    session: i64,
    czxid: i64,
    /// The lease TTL last granted.
    ttl: Duration,
    /// When the node is deleted unless renewed.
    until: watch::Sender<Instant>,
    /// Set by the expiry task before it deletes the node.
    expired: bool,
    stop: CancellationToken,
}

/// Our node in a lock's queue.
#[derive(Clone, Debug)]
struct Node {
    name: String,
    czxid: i64,
}

impl ZkBackend {
    /// Connects to the ensemble a `zk://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(ZkConfig::parse(url)?).await
    }

    /// Connects with a configuration built or adjusted by hand.
    pub async fn connect_with(config: ZkConfig) -> Result<Self> {
        let backend = Self {
            inner: Arc::new(Inner {
                containers: AtomicBool::new(config.container_parents),
                config,
                session: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
                held: Mutex::new(HashMap::new()),
                uncertain: Mutex::new(HashSet::new()),
                wakeups: AtomicU64::new(0),
            }),
        };
        backend.client().await?;
        Ok(backend)
    }

    /// The configuration in use.
    pub fn config(&self) -> &ZkConfig {
        &self.inner.config
    }

    /// Predecessor deletions that woke a waiter, so far: one per release when
    /// waiters queue, since each waiter watches only the node just before
    /// its own.
    pub fn wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    /// The current session's id, if there is a live one.
    pub fn session_id(&self) -> Option<i64> {
        self.inner.live_client().map(|c| c.session_id().0)
    }

    /// The session timeout the server granted to the current session.
    pub fn session_timeout(&self) -> Option<Duration> {
        self.inner.live_client().map(|c| c.session_timeout())
    }

    /// The longest a lease lasts without a renewal on the current session:
    /// `min(ttl, 2/3 of the session timeout)`. See the crate docs.
    pub fn lease_ttl(&self, ttl: Duration) -> Duration {
        match self.inner.live_client() {
            Some(c) => lease_ttl(ttl, &c),
            None => ttl,
        }
    }

    /// The live session, or a new one if it expired.
    async fn client(&self) -> Result<zk::Client> {
        if let Some(c) = self.inner.live_client() {
            return Ok(c);
        }
        let _one_at_a_time = self.inner.connecting.lock().await;
        if let Some(c) = self.inner.live_client() {
            return Ok(c);
        }
        let client = self.new_session().await?;
        tracing::debug!(session = %client.session_id(), timeout = ?client.session_timeout(), "new ZooKeeper session");
        *self.inner.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(client.clone());
        Ok(client)
    }

    async fn new_session(&self) -> Result<zk::Client> {
        let config = &self.inner.config;
        let mut connector = zk::Client::connector()
            .with_session_timeout(config.session_timeout)
            .with_fail_eagerly();
        if let Some((user, password)) = &config.digest {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let root = tokio::time::timeout(
            config.connect_timeout,
            connector.connect(&config.connect_string()),
        )
        .await
        .map_err(|_| Error::Timeout {
            operation: "connecting to ZooKeeper",
            after: config.connect_timeout,
        })?
        .map_err(|e| convert("connect", e))?;
        if config.chroot.is_empty() {
            return Ok(root);
        }
        let options = zk::CreateMode::Persistent.with_acls(self.acls());
        self.call("create the chroot", root.mkdir(&config.chroot, &options))
            .await?
            .map_err(|e| convert("create the chroot", e))?;
        root.chroot(config.chroot.as_str())
            .map_err(|_| Error::backend(format!("bad chroot {}", config.chroot)))
    }

    fn acls(&self) -> zk::Acls<'static> {
        if self.inner.config.digest.is_some() {
            zk::Acls::creator_all()
        } else {
            zk::Acls::anyone_all()
        }
    }

    /// Runs one request within the timeout. The outer error is ours (the
    /// timeout); the inner one is ZooKeeper's answer, for the caller to sort.
    async fn call<T>(
        &self,
        operation: &'static str,
        request: impl Future<Output = std::result::Result<T, zk::Error>>,
    ) -> Result<std::result::Result<T, zk::Error>> {
        tokio::time::timeout(self.inner.config.timeout, request)
            .await
            .map_err(|_| Error::Timeout {
                operation,
                after: self.inner.config.timeout,
            })
    }

    /// Creates our node under the lock's parent, or finds the one an earlier
    /// attempt created (when `look_first`: its reply may have been lost).
    async fn enqueue(
        &self,
        client: &zk::Client,
        req: &AcquireRequest,
        look_first: bool,
    ) -> Result<Node> {
        let parent = parent_path(&req.name);
        let prefix = node_prefix(req.owner);
        if (look_first || self.is_uncertain(req.owner))
            && let Some(node) = self.find_own(client, &req.name, req.owner).await?
        {
            self.set_uncertain(req.owner, false);
            return Ok(node);
        }
        let path = format!("{parent}/{prefix}");
        let acls = self.acls();
        let options = zk::CreateMode::EphemeralSequential.with_acls(acls);
        for _ in 0..4 {
            connected(client)?;
            let created = self
                .call("create the lock node", client.create(&path, &[], &options))
                .await;
            match created {
                Ok(Ok((stat, sequence))) => {
                    self.set_uncertain(req.owner, false);
                    return Ok(Node {
                        name: format!("{prefix}{sequence}"),
                        czxid: stat.czxid,
                    });
                }
                Ok(Err(zk::Error::NoNode)) => self.make_parent(client, &parent).await?,
                Ok(Err(e)) => {
                    if !no_data_change(&e) {
                        self.set_uncertain(req.owner, true);
                    }
                    return Err(convert("create the lock node", e));
                }
                Err(e) => {
                    self.set_uncertain(req.owner, true);
                    return Err(e);
                }
            }
        }
        Err(Error::Unavailable {
            backend: "zookeeper",
            message: format!("the lock parent {parent} kept disappearing"),
            source: None,
        })
    }

    /// Creates `/locks/<name>`: a container node where the server knows
    /// them, else a persistent one.
    async fn make_parent(&self, client: &zk::Client, parent: &str) -> Result<()> {
        let acls = self.acls();
        for _ in 0..3 {
            let containers = self.inner.containers.load(Ordering::Relaxed);
            let mode = if containers {
                zk::CreateMode::Container
            } else {
                zk::CreateMode::Persistent
            };
            let options = mode.with_acls(acls);
            match self
                .call(
                    "create the lock parent",
                    client.create(parent, &[], &options),
                )
                .await?
            {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) => {
                    let root = zk::CreateMode::Persistent.with_acls(acls);
                    match self
                        .call("create the locks root", client.create(ROOT, &[], &root))
                        .await?
                    {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(convert("create the locks root", e)),
                    }
                }
                Err(zk::Error::Unimplemented) if containers => {
                    tracing::info!(
                        "the ZooKeeper server has no container nodes; lock parents are deleted by distlock when empty"
                    );
                    self.inner.containers.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(convert("create the lock parent", e)),
            }
        }
        Err(Error::backend(format!(
            "could not create the lock parent {parent}"
        )))
    }

    /// Our node under `name` in this session, if there is one. Any other
    /// node of the same owner is deleted: a second one (an attempt applied
    /// twice) or one left by an earlier session of this backend (it dies
    /// with that session, so it must not be waited on).
    async fn find_own(
        &self,
        client: &zk::Client,
        name: &LockName,
        owner: OwnerToken,
    ) -> Result<Option<Node>> {
        let parent = parent_path(name);
        let Some(children) = self.children(client, &parent).await? else {
            return Ok(None);
        };
        self.adopt(client, &parent, owner, &children).await
    }

    /// Among `children`, the lowest-sequence node of `owner` that belongs to
    /// this session; every other node of `owner` is deleted.
    async fn adopt(
        &self,
        client: &zk::Client,
        parent: &str,
        owner: OwnerToken,
        children: &[String],
    ) -> Result<Option<Node>> {
        let session = client.session_id().0;
        let mut kept: Option<Node> = None;
        for (name, stat) in self.nodes_of(client, parent, owner, children).await? {
            let path = format!("{parent}/{name}");
            if stat.ephemeral_owner == session && kept.is_none() {
                kept = Some(Node {
                    name,
                    czxid: stat.czxid,
                });
                continue;
            }
            tracing::debug!(node = %path, "deleting a stale or second node of the same owner");
            match self
                .call("delete a stale node", client.delete(&path, None))
                .await?
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(convert("delete a stale node", e)),
            }
        }
        Ok(kept)
    }

    /// `owner`'s nodes among `children` that still exist, in queue order,
    /// with their stats.
    async fn nodes_of(
        &self,
        client: &zk::Client,
        parent: &str,
        owner: OwnerToken,
        children: &[String],
    ) -> Result<Vec<(String, zk::Stat)>> {
        let prefix = node_prefix(owner);
        let mut found = Vec::new();
        for (_, name) in queue(children)
            .into_iter()
            .filter(|(_, c)| c.starts_with(&prefix))
        {
            let path = format!("{parent}/{name}");
            if let Some(stat) = self
                .call("read our node", client.check_stat(&path))
                .await?
                .map_err(|e| convert("read our node", e))?
            {
                found.push((name.clone(), stat));
            }
        }
        Ok(found)
    }

    /// The children of `parent`, or `None` if it does not exist.
    async fn children(&self, client: &zk::Client, parent: &str) -> Result<Option<Vec<String>>> {
        match self
            .call("list the lock's queue", client.list_children(parent))
            .await?
        {
            Ok(children) => Ok(Some(children)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(convert("list the lock's queue", e)),
        }
    }

    /// Waits until our node is the first of the queue, watching only the
    /// node just before it each time. Returns when the request that found
    /// us first was sent.
    async fn wait_for_turn(
        &self,
        client: &zk::Client,
        name: &LockName,
        owner: OwnerToken,
        node: &mut Node,
        budget: &WaitBudget,
    ) -> Result<Instant> {
        let parent = parent_path(name);
        let prefix = node_prefix(owner);
        loop {
            connected(client)?;
            let sent = Instant::now();
            let children = self.children(client, &parent).await?.unwrap_or_default();
            let queue = queue(&children);
            if queue.iter().filter(|(_, n)| n.starts_with(&prefix)).count() > 1 {
                // An attempt applied twice, or a node of an earlier session:
                // keep this session's oldest.
                *node = self
                    .adopt(client, &parent, owner, &children)
                    .await?
                    .ok_or_else(|| Error::NotHeld {
                        name: name.to_string(),
                    })?;
                continue;
            }
            let Some(place) = queue.iter().position(|(_, n)| **n == node.name) else {
                return Err(Error::NotHeld {
                    name: name.to_string(),
                });
            };
            if place == 0 {
                return Ok(sent);
            }
            if budget.is_over() {
                return Err(budget.exhausted(name));
            }
            let before = format!("{parent}/{}", queue[place - 1].1);
            let watcher = match self
                .call("watch the predecessor", client.get_and_watch_data(&before))
                .await?
            {
                Ok((_, _, watcher)) => watcher,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(convert("watch the predecessor", e)),
            };
            let Some(event) = budget.race(watcher.changed()).await else {
                return Err(budget.exhausted(name));
            };
            match event.event_type {
                zk::EventType::NodeDeleted => {
                    self.inner.wakeups.fetch_add(1, Ordering::Relaxed);
                }
                zk::EventType::Session if event.session_state.is_terminated() => {
                    return Err(Error::Unavailable {
                        backend: "zookeeper",
                        message: format!(
                            "the session ended while waiting: {}",
                            event.session_state
                        ),
                        source: None,
                    });
                }
                _ => {}
            }
        }
    }

    /// Records a grant and starts the task that deletes its node if it is
    /// not renewed by `sent + lease TTL`.
    fn grant(
        &self,
        req: &AcquireRequest,
        client: &zk::Client,
        node: &Node,
        sent: Instant,
    ) -> Lease {
        let ttl = lease_ttl(req.ttl, client);
        let path = format!("{}/{}", parent_path(&req.name), node.name);
        let (until, deadline) = watch::channel(sent + ttl);
        let stop = CancellationToken::new();
        let held = Held {
            path: path.clone(),
            session: client.session_id().0,
            czxid: node.czxid,
            ttl,
            until,
            expired: false,
            stop: stop.clone(),
        };
        if let Some(old) = self.inner.held().insert(req.owner.to_u128(), held) {
            old.stop.cancel();
        }
        tokio::spawn(expire_when_due(
            Arc::downgrade(&self.inner),
            req.owner.to_u128(),
            deadline,
            stop,
        ));
        let token = FencingToken(u64::try_from(node.czxid).unwrap_or(0));
        Lease::new(req.name.clone(), req.owner, token, ttl, sent)
    }

    /// Deletes every node `owner` has under `name`; `Ok` when none is left.
    async fn remove_nodes(
        &self,
        client: &zk::Client,
        name: &LockName,
        owner: OwnerToken,
    ) -> Result<()> {
        let parent = parent_path(name);
        let prefix = node_prefix(owner);
        let Some(children) = self.children(client, &parent).await? else {
            return Ok(());
        };
        for child in children.iter().filter(|c| c.starts_with(&prefix)) {
            match self
                .call(
                    "delete our node",
                    client.delete(&format!("{parent}/{child}"), None),
                )
                .await?
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(convert("delete our node", e)),
            }
        }
        self.tidy_parent(client, &parent).await;
        Ok(())
    }

    /// Deletes an empty lock parent where the server does not do it.
    async fn tidy_parent(&self, client: &zk::Client, parent: &str) {
        if self.inner.containers.load(Ordering::Relaxed) {
            return;
        }
        match self
            .call("delete the lock parent", client.delete(parent, None))
            .await
        {
            Ok(Ok(()) | Err(zk::Error::NotEmpty | zk::Error::NoNode)) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, parent, "could not delete an empty lock parent")
            }
            Err(e) => tracing::debug!(error = %e, parent, "could not delete an empty lock parent"),
        }
    }

    /// Deletes our queued node by its path, if its session is still the
    /// live one; `false` if that could not be done.
    async fn delete_queued(&self, session: i64, name: &LockName, node: &Node) -> bool {
        let Some(client) = self.inner.live_client() else {
            return true; // the session is gone, and its nodes with it
        };
        if client.session_id().0 != session {
            return true;
        }
        if connected(&client).is_err() {
            return false;
        }
        let parent = parent_path(name);
        let path = format!("{parent}/{}", node.name);
        match self
            .call("leave the queue", client.delete(&path, None))
            .await
        {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                self.tidy_parent(&client, &parent).await;
                true
            }
            _ => false,
        }
    }

    /// Removes `owner`'s nodes under `name` now, or keeps trying in the
    /// background for as long as the session that owns them lives.
    async fn leave(&self, name: &LockName, owner: OwnerToken) -> Result<()> {
        let Some(client) = self.inner.live_client() else {
            // The session is gone, and its ephemeral nodes with it.
            return Ok(());
        };
        let outcome = match connected(&client) {
            Ok(()) => self.remove_nodes(&client, name, owner).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                self.set_uncertain(owner, false);
                Ok(())
            }
            Err(e) if !e.is_retryable() => Err(e),
            Err(e) => {
                tracing::debug!(error = %e, lock = %name, "could not remove our node; retrying in the background");
                let backend = self.clone();
                let name = name.clone();
                tokio::spawn(async move { backend.keep_removing(client, name, owner).await });
                Err(e)
            }
        }
    }

    /// Retries [`Self::remove_nodes`] while `client`'s session lives.
    async fn keep_removing(&self, client: zk::Client, name: LockName, owner: OwnerToken) {
        let mut backoff = Backoff::with_cap(RETRY_CAP);
        loop {
            if client.state().is_terminated() {
                return;
            }
            if connected(&client).is_ok() {
                match self.remove_nodes(&client, &name, owner).await {
                    Ok(()) => {
                        self.set_uncertain(owner, false);
                        return;
                    }
                    Err(e) if !e.is_retryable() => {
                        tracing::warn!(error = %e, lock = %name, "cannot remove a queued lock node");
                        return;
                    }
                    Err(_) => {}
                }
            }
            tokio::time::sleep(backoff.next_nap()).await;
        }
    }

    fn is_uncertain(&self, owner: OwnerToken) -> bool {
        self.inner
            .uncertain
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&owner.to_u128())
    }

    fn set_uncertain(&self, owner: OwnerToken, yes: bool) {
        let mut set = self
            .inner
            .uncertain
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if yes {
            set.insert(owner.to_u128());
        } else {
            set.remove(&owner.to_u128());
        }
    }

    /// The lease this backend already granted to `req`, if it still holds
    /// it: acquiring again with the same request is idempotent.
    fn granted_before(&self, req: &AcquireRequest) -> Option<Lease> {
        let session = self.session_id()?;
        let held = self.inner.held();
        let h = held.get(&req.owner.to_u128())?;
        let until = *h.until.borrow();
        if h.expired || h.session != session || Instant::now() >= until {
            return None;
        }
        let token = FencingToken(u64::try_from(h.czxid).unwrap_or(0));
        Some(Lease::new(
            req.name.clone(),
            req.owner,
            token,
            h.ttl,
            until - h.ttl,
        ))
    }

    fn not_held(lease: &Lease) -> Error {
        Error::NotHeld {
            name: lease.name().to_string(),
        }
    }
}

impl Inner {
    fn live_client(&self) -> Option<zk::Client> {
        self.session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|c| !c.state().is_terminated())
            .cloned()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The expiry task of one grant: sleeps until the grant's deadline (moved
/// by each renewal); if it passes, deletes the node so that a holder that
/// stopped renewing frees the lock after its TTL even though its session
/// lives on.
async fn expire_when_due(
    inner: Weak<Inner>,
    owner: u128,
    mut until: watch::Receiver<Instant>,
    stop: CancellationToken,
) {
    loop {
        let due = *until.borrow_and_update();
        tokio::select! {
            () = stop.cancelled() => return,
            () = sleep_until(due) => break,
            changed = until.changed() => if changed.is_err() { return },
        }
    }
    let Some(strong) = inner.upgrade() else {
        return;
    };
    let (path, session) = {
        let mut held = strong.held();
        match held.get_mut(&owner) {
            Some(h) if !h.stop.is_cancelled() => {
                h.expired = true;
                (h.path.clone(), h.session)
            }
            _ => return,
        }
    };
    let backend = ZkBackend { inner: strong };
    tracing::debug!(node = %path, "lease not renewed in time; deleting its node");
    let mut backoff = Backoff::with_cap(RETRY_CAP);
    loop {
        let Some(client) = backend.inner.live_client() else {
            break;
        };
        if client.session_id().0 != session {
            break; // that session ended, and the node with it
        }
        if connected(&client).is_ok() {
            match backend
                .call("delete an expired node", client.delete(&path, None))
                .await
            {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                    if let Some((parent, _)) = path.rsplit_once('/') {
                        backend.tidy_parent(&client, parent).await;
                    }
                    break;
                }
                Ok(Err(e)) if no_data_change(&e) && !matches!(e, zk::Error::Throttled) => {
                    tracing::warn!(error = %e, node = %path, "cannot delete an expired lock node");
                    break;
                }
                _ => {}
            }
        }
        if stop.is_cancelled() {
            return;
        }
        tokio::time::sleep(backoff.next_nap()).await;
    }
    let mut held = backend.inner.held();
    if held.get(&owner).is_some_and(|h| h.expired) {
        held.remove(&owner);
    }
}

/// `min(ttl, 2/3 of the session timeout)`: the session's expiry on the
/// server is counted from the last request it heard, and can come a little
/// early (ticks, a follower relaying to the leader), so a lease never relies
/// on more than two thirds of it.
fn lease_ttl(ttl: Duration, client: &zk::Client) -> Duration {
    ttl.min(client.session_timeout() * 2 / 3)
}

/// Fails fast while the session is disconnected: a request sent now would
/// wait for the reconnection.
fn connected(client: &zk::Client) -> Result<()> {
    match client.state() {
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => Ok(()),
        state => Err(Error::Unavailable {
            backend: "zookeeper",
            message: format!("the session is {state}"),
            source: None,
        }),
    }
}

/// `/locks/<name>`, the parent of one lock's nodes.
fn parent_path(name: &LockName) -> String {
    format!("{ROOT}/{name}")
}

/// `_c_<owner as a UUID>-lock-`: the name of an owner's node before the
/// server appends the sequence number.
fn node_prefix(owner: OwnerToken) -> String {
    let v = owner.to_u128();
    format!(
        "{PROTECTED}{:08x}-{:04x}-{:04x}-{:04x}-{:012x}-{LOCK_NAME}",
        v >> 96,
        (v >> 80) & 0xffff,
        (v >> 64) & 0xffff,
        (v >> 48) & 0xffff,
        v & 0xffff_ffff_ffff
    )
}

/// The sequence number of a lock node: what follows the last `lock-`, as
/// Curator sorts them.
fn sequence_of(child: &str) -> Option<i64> {
    let (_, digits) = child.rsplit_once(LOCK_NAME)?;
    digits.parse().ok()
}

/// The lock nodes among `children`, in queue order.
fn queue(children: &[String]) -> Vec<(i64, &String)> {
    let mut queue: Vec<(i64, &String)> = children
        .iter()
        .filter_map(|c| sequence_of(c).map(|s| (s, c)))
        .collect();
    queue.sort();
    queue
}

/// Whether a failed write certainly changed nothing on the server.
fn no_data_change(e: &zk::Error) -> bool {
    use zk::Error as E;
    matches!(
        e,
        E::NoNode
            | E::NoAuth
            | E::BadVersion
            | E::NoChildrenForEphemerals
            | E::NodeExists
            | E::NotEmpty
            | E::InvalidAcl
            | E::AuthFailed
            | E::SessionMoved
            | E::NotReadOnly
            | E::QuotaExceeded
            | E::Throttled
            | E::MarshallingError
            | E::Unimplemented
            | E::BadArguments(_)
            | E::SessionExpired
            | E::ClientClosed
    )
}

fn convert(operation: &'static str, e: zk::Error) -> Error {
    use zk::Error as E;
    match e {
        E::ConnectionLoss
        | E::Timeout
        | E::NoHosts
        | E::SessionExpired
        | E::SessionMoved
        | E::ClientClosed
        | E::Throttled
        | E::NotReadOnly => Error::Unavailable {
            backend: "zookeeper",
            message: format!("{operation}: {e}"),
            source: Some(Box::new(e)),
        },
        other => Error::Backend {
            message: format!("zookeeper {operation}: {other}"),
            source: Some(Box::new(other)),
        },
    }
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
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
        if let Some(lease) = self.granted_before(req) {
            return Ok(lease);
        }
        let mut backoff = Backoff::with_cap(RETRY_CAP);
        // Our node and the session it belongs to, once created.
        let mut queued: Option<(i64, Node)> = None;
        let mut attempts = 0;
        let outcome = loop {
            let attempt = async {
                // Making a session is bounded by the connect timeout, but
                // a bounded wait must not outlast its budget for it.
                let client = match self.inner.live_client() {
                    Some(c) => c,
                    None if budget.is_over() => self.client().await?,
                    None => match budget.race(self.client()).await {
                        Some(c) => c?,
                        None => return Err(budget.exhausted(&req.name)),
                    },
                };
                connected(&client)?;
                let session = client.session_id().0;
                let mut node = match &queued {
                    Some((s, node)) if *s == session => node.clone(),
                    _ => self.enqueue(&client, req, attempts > 0).await?,
                };
                queued = Some((session, node.clone()));
                let sent = self
                    .wait_for_turn(&client, &req.name, req.owner, &mut node, budget)
                    .await;
                queued = Some((session, node.clone()));
                Ok::<_, Error>((client, node, sent?))
            };
            let result = attempt.await;
            attempts += 1;
            match result {
                Ok(granted) => break Ok(granted),
                // A lost connection, an election, an expired session: queue
                // again (idempotent: the same node if it survived) within
                // the budget.
                Err(e)
                    if e.is_retryable()
                        && !matches!(e, Error::Busy { .. } | Error::WaitTimeout { .. }) =>
                {
                    tracing::debug!(error = %e, "waiting for a ZooKeeper lock failed; trying again");
                    if budget.is_over() || !budget.sleep(backoff.next_nap()).await {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok((client, node, sent)) => Ok(self.grant(req, &client, &node, sent)),
            Err(e) => {
                let removed = match &queued {
                    Some((session, node)) if !self.is_uncertain(req.owner) => {
                        self.delete_queued(*session, &req.name, node).await
                    }
                    _ => false,
                };
                if !removed && (queued.is_some() || self.is_uncertain(req.owner)) {
                    let _ = self.leave(&req.name, req.owner).await;
                }
                Err(e)
            }
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let owner = lease.owner().to_u128();
        let token = i64::try_from(lease.token().get()).unwrap_or(i64::MAX);
        let (path, session) = {
            let held = self.inner.held();
            match held.get(&owner) {
                Some(h) if !h.expired && h.czxid == token && Instant::now() < *h.until.borrow() => {
                    (h.path.clone(), h.session)
                }
                _ => return Err(Self::not_held(lease)),
            }
        };
        // Renewing never starts a new session: a lease lives and dies with
        // the session that took it.
        let client = match self.inner.live_client() {
            Some(c) if c.session_id().0 == session => c,
            _ => return Err(Self::not_held(lease)),
        };
        connected(&client)?;
        let sent = Instant::now();
        let stat = match self.call("renew", client.check_stat(&path)).await? {
            Ok(stat) => stat,
            Err(zk::Error::SessionExpired) => return Err(Self::not_held(lease)),
            Err(e) => return Err(convert("renew", e)),
        };
        let mine = stat.is_some_and(|s| s.czxid == token && s.ephemeral_owner == session);
        let ttl = lease_ttl(ttl, &client);
        let mut held = self.inner.held();
        match held.get_mut(&owner) {
            Some(h) if mine && !h.expired && h.czxid == token => {
                h.ttl = ttl;
                h.until.send_replace(sent + ttl);
                Ok(lease.renewed(ttl, sent))
            }
            _ => Err(Self::not_held(lease)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let owner = lease.owner().to_u128();
        let token = i64::try_from(lease.token().get()).unwrap_or(i64::MAX);
        let known = self
            .inner
            .held()
            .get(&owner)
            .map(|h| (h.path.clone(), h.expired));
        let forget = || {
            if let Some(h) = self.inner.held().remove(&owner) {
                h.stop.cancel();
            }
        };
        if let Some((_, true)) = known {
            return Err(Self::not_held(lease));
        }
        let client = self.client().await?;
        connected(&client)?;
        let path = match known {
            Some((path, _)) => path,
            // A lease this backend did not grant: find its node by owner
            // and token, whatever session holds it.
            None => {
                let parent = parent_path(lease.name());
                let children = self.children(&client, &parent).await?.unwrap_or_default();
                let found = self
                    .nodes_of(&client, &parent, lease.owner(), &children)
                    .await?
                    .into_iter()
                    .find(|(_, stat)| stat.czxid == token);
                match found {
                    Some((name, _)) => format!("{parent}/{name}"),
                    None => return Err(Self::not_held(lease)),
                }
            }
        };
        let stat = match self.call("release", client.check_stat(&path)).await? {
            Ok(Some(stat)) if stat.czxid == token => stat,
            Ok(_) => {
                forget();
                return Err(Self::not_held(lease));
            }
            Err(e) => return Err(convert("release", e)),
        };
        match self
            .call("release", client.delete(&path, Some(stat.version)))
            .await?
        {
            Ok(()) => {
                forget();
                if let Some((parent, _)) = path.rsplit_once('/') {
                    self.tidy_parent(&client, parent).await;
                }
                Ok(())
            }
            Err(zk::Error::NoNode | zk::Error::BadVersion) => {
                forget();
                Err(Self::not_held(lease))
            }
            Err(e) => Err(convert("release", e)),
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        if let Some(h) = self.inner.held().remove(&req.owner.to_u128()) {
            h.stop.cancel();
        }
        self.leave(&req.name, req.owner).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let client = self.client().await?;
        let parent = parent_path(name);
        // The server we are connected to may lag behind the leader.
        if let Ok(Err(e)) = self.call("sync", client.sync(&parent)).await {
            tracing::debug!(error = %e, "sync before reading the holder failed");
        }
        for _ in 0..3 {
            let Some(children) = self.children(&client, &parent).await? else {
                return Ok(None);
            };
            let Some((_, first)) = queue(&children).first().copied() else {
                return Ok(None);
            };
            let path = format!("{parent}/{first}");
            let Some(stat) = self
                .call("read the holder", client.check_stat(&path))
                .await?
                .map_err(|e| convert("read the holder", e))?
            else {
                continue; // released in between: look again
            };
            let owner = first.strip_prefix(PROTECTED).unwrap_or(first);
            return Ok(Some(Holder {
                owner: owner.chars().take(8).collect(),
                token: FencingToken(u64::try_from(stat.czxid).unwrap_or(0)),
                expires_in: None,
            }));
        }
        Err(Error::Unavailable {
            backend: "zookeeper",
            message: format!("the holder of {name} kept changing"),
            source: None,
        })
    }
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.inner.config)
            .field("session", &self.session_id().map(|id| format!("{id:#x}")))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_follow_curator() {
        let owner = OwnerToken::from_hex("0123456789abcdef0011223344556677").unwrap();
        assert_eq!(
            node_prefix(owner),
            "_c_01234567-89ab-cdef-0011-223344556677-lock-"
        );
        assert!(node_prefix(owner)[3..].starts_with(&owner.short()));
        let name = format!("{}0000000042", node_prefix(owner));
        assert_eq!(sequence_of(&name), Some(42));
        assert_eq!(sequence_of("unrelated"), None);
    }

    #[test]
    fn the_queue_is_ordered_by_sequence_only() {
        let children: Vec<String> = [
            "_c_ffffffff-0000-0000-0000-000000000000-lock-0000000003",
            "_c_00000000-0000-0000-0000-000000000000-lock-0000000010",
            "not-a-lock-node",
            "_c_88888888-0000-0000-0000-000000000000-lock-0000000001",
        ]
        .map(String::from)
        .to_vec();
        let order: Vec<i64> = queue(&children).iter().map(|(s, _)| *s).collect();
        assert_eq!(order, [1, 3, 10]);
    }
}
