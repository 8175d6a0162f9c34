//! The ZooKeeper session of a backend ([`Core`]): one per backend, shared by
//! every lock it takes, replaced when it expires; every request bounded by
//! the configured timeout. Calls that find the session ended share the making
//! of the next one, and its failure: none waits for more than one attempt
//! (the connect timeout, then the timeout of creating the chroot).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::backend::SingleFlight;
use lock_core::tls::TlsMaterial;
use lock_core::{Error, Result};
use zookeeper_client as zk;

use lock_core::backend::OwnerToken;
use lock_core::backend::{AcquireRequest, WaitBudget};

use crate::ZkConfig;
use crate::error::{convert, unavailable};
use crate::held::Held;
use crate::waiters::ZkHandovers;

/// What the protocol modules share of one backend: its session and how to
/// make the next one, and the state its locks keep beside it.
pub(crate) struct Core {
    pub(crate) config: ZkConfig,
    /// The current session; replaced when it expires, if the backend makes
    /// its own sessions.
    session: Mutex<Option<zk::Client>>,
    /// Whether the backend makes its sessions (from a URL), or was given
    /// one it cannot replace (`ZkBackend::from_client`).
    own_sessions: bool,
    /// The making of a new session, which every call that finds none
    /// joins, so that only one is made.
    connecting: SingleFlight<zk::Client>,
    /// Whether the server accepts container nodes (cleared on `Unimplemented`).
    pub(crate) containers: AtomicBool,
    /// Leases granted by this backend, by owner token, each with the task
    /// that deletes its node when it is not renewed in time.
    held: Mutex<HashMap<u128, Held>>,
    /// Owners whose create may have been applied without a reply.
    uncertain: Mutex<HashSet<u128>>,
    pub(crate) wakeups: AtomicU64,
    /// Waiters a release of this backend can grant directly.
    pub(crate) handovers: Arc<ZkHandovers>,
}

impl Core {
    /// The core of a backend that makes its own sessions (from a URL), or
    /// is given one it cannot replace; `config` is checked.
    pub(crate) fn new(config: ZkConfig, own_sessions: bool) -> Self {
        Self {
            containers: AtomicBool::new(config.container_parents),
            config,
            session: Mutex::new(None),
            own_sessions,
            connecting: SingleFlight::new(),
            held: Mutex::new(HashMap::new()),
            uncertain: Mutex::new(HashSet::new()),
            wakeups: AtomicU64::new(0),
            handovers: Arc::default(),
        }
    }

    /// Makes `client` the current session.
    pub(crate) fn set_session(&self, client: zk::Client) {
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(client);
    }

    /// The live session, or a new one if it expired (the one being made,
    /// if another call is making it).
    pub(crate) async fn client(self: &Arc<Self>) -> Result<zk::Client> {
        if let Some(c) = self.live_client() {
            return Ok(c);
        }
        if !self.own_sessions {
            let given = self.session.lock().unwrap_or_else(|p| p.into_inner());
            let state = given
                .as_ref()
                .map_or(zk::SessionState::Closed, |c| c.state());
            return Err(session_ended(state));
        }
        let core = self.clone();
        let within = self.config.connect_timeout + self.config.timeout;
        self.connecting
            .run("making a ZooKeeper session", within, move || async move {
                // Made while this call looked for the attempt.
                if let Some(c) = core.live_client() {
                    return Ok(c);
                }
                let client = core.new_session().await?;
                tracing::debug!(session = %client.session_id(), timeout = ?client.session_timeout(), "new ZooKeeper session");
                core.set_session(client.clone());
                Ok(client)
            })
            .await
    }

    async fn new_session(&self) -> Result<zk::Client> {
        let config = &self.config;
        let mut connector = zk::Client::connector()
            .with_session_timeout(config.session_timeout)
            .with_fail_eagerly();
        if let Some((user, password)) = &config.digest {
            let password = password.read(crate::NAME)?;
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let tls = config.tls.load(crate::NAME)?;
        if let Some(material) = &tls {
            connector = connector.with_tls(tls_options(material)?);
        }
        let connect_string = config.connect_string();
        let connecting = async {
            match tls {
                Some(_) => connector.secure_connect(&connect_string).await,
                None => connector.connect(&connect_string).await,
            }
        };
        let root = tokio::time::timeout(config.connect_timeout, connecting)
            .await
            .map_err(|_| Error::timeout("connecting to ZooKeeper", config.connect_timeout))?
            .map_err(|e| match e {
                // The client says no more than this of why every server failed;
                // the likeliest reasons depend on TLS.
                zk::Error::NoHosts if config.tls.is_enabled() => convert(
                    "connect over TLS (check that the servers listen on a secureClientPort, \
                 that tls_ca signed their certificate and that they accept the client certificate)",
                    e,
                ),
                zk::Error::NoHosts => convert(
                    "connect (no server answered; if they take TLS only, add tls=true or tls_ca)",
                    e,
                ),
                e => convert("connect", e),
            })?;
        self.enter_chroot(root).await
    }

    /// `client` moved into the configured chroot (below its own, if it has
    /// one), which is created if missing.
    pub(crate) async fn enter_chroot(&self, client: zk::Client) -> Result<zk::Client> {
        let chroot = &self.config.chroot;
        if chroot.is_empty() {
            return Ok(client);
        }
        let options = zk::CreateMode::Persistent.with_acls(self.acls());
        self.call("create the chroot", client.mkdir(chroot, &options))
            .await?
            .map_err(|e| convert("create the chroot", e))?;
        let full = format!("{}{chroot}", client.path().trim_end_matches('/'));
        client
            .chroot(full.clone())
            .map_err(|_| Error::backend(format!("bad chroot {full}")))
    }

    /// The ACL of every node distlock creates.
    pub(crate) fn acls(&self) -> zk::Acls<'static> {
        if self.config.creator_only {
            zk::Acls::creator_all()
        } else {
            zk::Acls::anyone_all()
        }
    }

    /// Brings the server we are connected to up to date with the leader
    /// before a read that must see other sessions' writes: a follower may
    /// lag behind. A failed sync is only logged; the read that follows
    /// reports the trouble if there is any.
    pub(crate) async fn catch_up(&self, client: &zk::Client, path: &str) {
        if let Ok(Err(e)) = self.call("sync", client.sync(path)).await {
            tracing::debug!(error = %e, path, "sync with the leader failed");
        }
    }

    /// Runs one request within the timeout. The outer error is ours (the
    /// timeout); the inner one is ZooKeeper's answer, for the caller to sort.
    pub(crate) async fn call<T>(
        &self,
        operation: &'static str,
        request: impl Future<Output = std::result::Result<T, zk::Error>>,
    ) -> Result<std::result::Result<T, zk::Error>> {
        tokio::time::timeout(self.config.timeout, request)
            .await
            .map_err(|_| Error::timeout(operation, self.config.timeout))
    }

    /// The current session, unless it has ended.
    pub(crate) fn live_client(&self) -> Option<zk::Client> {
        self.session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|c| !c.state().is_terminated())
            .cloned()
    }

    pub(crate) fn held(&self) -> MutexGuard<'_, HashMap<u128, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live session, or a new one; making one is bounded by the
    /// connect timeout, but a bounded wait must not outlast its budget for
    /// it.
    pub(crate) async fn session_for(
        self: &Arc<Self>,
        req: &AcquireRequest,
        budget: &WaitBudget,
    ) -> Result<zk::Client> {
        let client = match self.live_client() {
            Some(c) => c,
            None if budget.is_over() => self.client().await?,
            None => match budget.race(self.client()).await {
                Some(c) => c?,
                None => return Err(budget.exhausted(&req.name)),
            },
        };
        connected(&client)?;
        Ok(client)
    }

    /// Whether a create of `owner`'s may have been applied without a reply.
    pub(crate) fn is_uncertain(&self, owner: OwnerToken) -> bool {
        self.uncertain
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&owner.to_u128())
    }

    /// Records whether a create of `owner`'s may have been applied
    /// without a reply.
    pub(crate) fn set_uncertain(&self, owner: OwnerToken, yes: bool) {
        let mut set = self.uncertain.lock().unwrap_or_else(|p| p.into_inner());
        if yes {
            set.insert(owner.to_u128());
        } else {
            set.remove(&owner.to_u128());
        }
    }
}

/// The error of a backend whose given session has ended: not transient, as
/// no retry of this backend can get past it.
pub(crate) fn session_ended(state: zk::SessionState) -> Error {
    Error::backend(format!(
        "the ZooKeeper session given to ZkBackend::from_client is {state}; the backend cannot \
             open another: make a new client and a new backend"
    ))
}

/// `min(ttl, 2/3 of the session timeout)`: the session's expiry on the
/// server is counted from the last request it heard, and can come a little
/// early (ticks, a follower relaying to the leader), so a lease never relies
/// on more than two thirds of it.
pub(crate) fn lease_ttl(ttl: Duration, client: &zk::Client) -> Duration {
    ttl.min(client.session_timeout() * 2 / 3)
}

/// Fails fast while the session is disconnected: a request sent now would
/// wait for the reconnection.
pub(crate) fn connected(client: &zk::Client) -> Result<()> {
    match client.state() {
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => Ok(()),
        state => Err(unavailable(format!("the session is {state}"))),
    }
}

/// zookeeper-client's TLS options from the PEM files: the CA file, or the
/// system's trust store (a PEM bundle, which is what the client takes), and
/// the client certificate.
fn tls_options(material: &TlsMaterial) -> Result<zk::TlsOptions> {
    let pem = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let ca = match material.ca_pem() {
        Some(ca) => pem(ca),
        None => pem(&lock_core::tls::system_roots_pem(crate::NAME)?),
    };
    let options = zk::TlsOptions::new()
        .with_pem_ca(&ca)
        .map_err(|e| material.refused(format!("option \"tls_ca\": {e}")))?;
    match material.identity_pem() {
        Some((cert, key)) => options
            .with_pem_identity(&pem(cert), &pem(key))
            .map_err(|e| material.refused(format!("the client certificate: {e}"))),
        None => Ok(options),
    }
}
