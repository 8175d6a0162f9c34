//! The ZooKeeper session of a [`ZkBackend`]: one per backend, shared by every
//! lock it takes, replaced when it expires; every request bounded by the
//! configured timeout. Calls that find the session ended share the making
//! of the next one, and its failure: none waits for more than one attempt
//! (the connect timeout, then the timeout of creating the chroot).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::backend::SingleFlight;
use lock_core::tls::{TlsMaterial, TlsOptions};
use lock_core::{Error, Result};
use zookeeper_client as zk;

use crate::backend::ZkBackend;
use crate::config::{ZkConfig, ZkOptions};
use crate::error::{convert, unavailable};
use crate::expiry::Held;
use crate::handover::ZkHandovers;

pub(crate) struct Inner {
    pub(crate) config: ZkConfig,
    /// The current session; replaced when it expires, if the backend makes
    /// its own sessions.
    session: Mutex<Option<zk::Client>>,
    /// Whether the backend makes its sessions (from a URL), or was given
    /// one it cannot replace ([`ZkBackend::from_client`]).
    own_sessions: bool,
    /// Whether nodes get the creator-only ACL.
    creator_only: bool,
    /// The making of a new session, which every call that finds none
    /// joins, so that only one is made.
    connecting: SingleFlight<zk::Client>,
    /// Whether the server accepts container nodes (cleared on `Unimplemented`).
    pub(crate) containers: AtomicBool,
    /// Leases granted by this backend, by owner token, each with the task
    /// that deletes its node when it is not renewed in time.
    held: Mutex<HashMap<u128, Held>>,
    /// Owners whose create may have been applied without a reply.
    pub(crate) uncertain: Mutex<HashSet<u128>>,
    pub(crate) wakeups: AtomicU64,
    /// Waiters a release of this backend can grant directly.
    pub(crate) handovers: Arc<ZkHandovers>,
}

impl ZkBackend {
    /// Connects to the ensemble a `zk://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(ZkConfig::parse(url)?).await
    }

    /// Connects with a configuration built or adjusted by hand.
    pub async fn connect_with(config: ZkConfig) -> Result<Self> {
        let backend = Self::unconnected(config);
        backend.client().await?;
        Ok(backend)
    }

    /// A backend on the session of a `zookeeper_client::Client` the
    /// application made, with `options` in place of a URL's. The session
    /// stays the application's: locks are ephemeral nodes of it, it is
    /// watched as the backend's own would be (a lease is at risk while it
    /// is disconnected, and lost when it expires), and closing it ends
    /// them. Requests go through clones of the client, each bounded by the
    /// options' timeout. The client may have a chroot: the options' chroot
    /// is below it.
    ///
    /// The backend cannot replace the session when it expires, as a
    /// backend made from a URL does (the client cannot say how to reach
    /// the ensemble again, nor with which credentials): every lock of the
    /// backend is then lost, and every later call fails with an error that
    /// says so. Make a new client and a new backend then. A session that
    /// has ended already is refused.
    ///
    /// [`config`](Self::config) then holds the options, no hosts, and the
    /// session's timeout.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_zk::ZkBackend;
    /// use lock_zk::config::ZkOptions;
    ///
    /// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await.unwrap();
    /// let backend = ZkBackend::from_client(client.clone(), ZkOptions::new().chroot("/app")).await?;
    /// let locker = Locker::new(backend);
    /// let guard = locker.lock("schema-migration").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: zk::Client, options: ZkOptions) -> Result<Self> {
        let options = options.check()?;
        let state = client.state();
        if state.is_terminated() {
            return Err(session_ended(state));
        }
        let config = ZkConfig {
            hosts: Vec::new(),
            chroot: options.chroot,
            session_timeout: client.session_timeout(),
            digest: None,
            container_parents: options.container_parents,
            timeout: options.timeout,
            connect_timeout: options.timeout,
            tls: TlsOptions::default(),
        };
        let backend = Self::with_session_rule(config, false, options.creator_only);
        let client = backend.enter_chroot(client).await?;
        *backend
            .inner
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(client);
        Ok(backend)
    }

    /// A backend that makes its session on first use.
    pub(crate) fn unconnected(config: ZkConfig) -> Self {
        let creator_only = config.digest.is_some();
        Self::with_session_rule(config, true, creator_only)
    }

    fn with_session_rule(config: ZkConfig, own_sessions: bool, creator_only: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                containers: AtomicBool::new(config.container_parents),
                config,
                session: Mutex::new(None),
                own_sessions,
                creator_only,
                connecting: SingleFlight::new(),
                held: Mutex::new(HashMap::new()),
                uncertain: Mutex::new(HashSet::new()),
                wakeups: AtomicU64::new(0),
                handovers: Arc::default(),
            }),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &ZkConfig {
        &self.inner.config
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

    /// The live session, or a new one if it expired (the one being made,
    /// if another call is making it).
    pub(crate) async fn client(&self) -> Result<zk::Client> {
        if let Some(c) = self.inner.live_client() {
            return Ok(c);
        }
        if !self.inner.own_sessions {
            let given = self.inner.session.lock().unwrap_or_else(|p| p.into_inner());
            let state = given
                .as_ref()
                .map_or(zk::SessionState::Closed, |c| c.state());
            return Err(session_ended(state));
        }
        let backend = self.clone();
        let within = self.inner.config.connect_timeout + self.inner.config.timeout;
        self.inner
            .connecting
            .run("making a ZooKeeper session", within, move || async move {
                // Made while this call looked for the attempt.
                if let Some(c) = backend.inner.live_client() {
                    return Ok(c);
                }
                let client = backend.new_session().await?;
                tracing::debug!(session = %client.session_id(), timeout = ?client.session_timeout(), "new ZooKeeper session");
                *backend.inner.session.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(client.clone());
                Ok(client)
            })
            .await
    }

    async fn new_session(&self) -> Result<zk::Client> {
        let config = &self.inner.config;
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
    async fn enter_chroot(&self, client: zk::Client) -> Result<zk::Client> {
        let chroot = &self.inner.config.chroot;
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
        if self.inner.creator_only {
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
        tokio::time::timeout(self.inner.config.timeout, request)
            .await
            .map_err(|_| Error::timeout(operation, self.inner.config.timeout))
    }
}

impl Inner {
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
}

/// The error of a backend whose given session has ended: not transient, as
/// no retry of this backend can get past it.
fn session_ended(state: zk::SessionState) -> Error {
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
