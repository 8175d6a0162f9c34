//! The connection a [`Node`](crate::node::Node) sends its commands on: to
//! one server; to a Redis Cluster, where redis-rs's cluster client routes
//! each command to the master of its key's slot and follows `MOVED` and
//! `ASK` as slots move; or to the master Redis Sentinel names.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::backend::SingleFlight;
use lock_core::{Error, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Client, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind,
    TlsMode, Value,
};

use crate::config::sentinel::SentinelConfig;
use crate::config::{RedisConfig, Topology};
use crate::error::convert;
use crate::tls::explained;

/// One server's reconnecting connection, a cluster's, or the one to the
/// master that Redis Sentinel names.
#[derive(Clone)]
pub enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// A cluster.
    Cluster(ClusterConnection),
    /// The master Sentinel names.
    Sentinel(Arc<SentinelConn>),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(s) => Box::pin(s.run(async move |c| c.req_packed_command(cmd).await)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(s) => {
                Box::pin(s.run(async move |c| c.req_packed_commands(pipeline, offset, count).await))
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(_) => 0,
        }
    }
}

/// A connection manager to `client`: reconnecting by itself, each command
/// bounded by `timeout`.
pub async fn open(
    client: &Client,
    label: &str,
    connect_timeout: Duration,
    timeout: Duration,
) -> Result<Conn> {
    let manager = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1);
    let connect = client.get_connection_manager_with_config(manager);
    let tls = matches!(
        client.get_connection_info().addr(),
        ConnectionAddr::TcpTls { .. }
    );
    let conn = tokio::time::timeout(connect_timeout, connect)
        .await
        .map_err(|_| Error::timeout("connecting to redis", connect_timeout))?
        .map_err(|e| explained(convert(label, "connect", connect_timeout, e), tls))?;
    Ok(Conn::Single(conn))
}

/// A cluster client of the seed nodes of `config` (a
/// [`Topology::Cluster`]), with its timeouts and TLS (every node's
/// connection, not only the seeds'): every command bounded by `timeout`,
/// each connection by `connect_timeout`, and two retries (a `MOVED` or
/// `ASK` costs one).
pub fn cluster_client(config: &RedisConfig) -> Result<ClusterClientBuilder> {
    let Topology::Cluster(seeds) = &config.topology else {
        return Err(Error::invalid_config(crate::NAME, "not a cluster"));
    };
    let scheme = if config.tls.is_enabled() {
        "rediss"
    } else {
        "redis"
    };
    let urls: Vec<String> = seeds
        .iter()
        .map(|s| format!("{scheme}://{}", s.addr))
        .collect();
    let mut builder = ClusterClient::builder(urls)
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.timeout)
        .retries(2);
    if let Some(first) = seeds.first() {
        if let Some(user) = &first.username {
            builder = builder.username(user);
        }
        if let Some(password) = &first.password {
            builder = builder.password(password.read(crate::NAME)?);
        }
    }
    Ok(match crate::tls::certificates(&config.tls)? {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    })
}

/// A cluster connection through `client`, which learns the cluster's
/// slots from whichever of its seed nodes answers first; `tls` says
/// whether it uses TLS (for the hint on a failure).
pub async fn open_cluster(
    client: &ClusterClient,
    label: &str,
    connect_timeout: Duration,
    tls: bool,
) -> Result<ClusterConnection> {
    tokio::time::timeout(connect_timeout, client.get_async_connection())
        .await
        .map_err(|_| Error::timeout("connecting to the redis cluster", connect_timeout))?
        .map_err(|e| explained(convert(label, "connect", connect_timeout, e), tls))
}

/// The master that Redis Sentinel names, followed across failovers: the
/// connection to it is dropped when it fails in a way a failover explains
/// (no connection, a timeout, `READONLY` from a master demoted to replica),
/// and the next command asks the sentinels again. The failed command is
/// not sent again: whether it was applied is unknown, which the caller
/// handles as for any lost reply.
///
/// Commands that find no connection share one look-up, and its failure:
/// none waits for more than one look-up (at most twice the connect
/// timeout: the sentinels' answer, then the connection), however many
/// came before it.
pub struct SentinelConn {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the master, with the number of the look-up that
    /// found it.
    master: std::sync::Mutex<Option<(u64, ConnectionManager)>>,
    /// The look-up in progress, which every command that finds no
    /// connection joins.
    resolving: SingleFlight<(u64, ConnectionManager)>,
    /// Look-ups made so far.
    lookups: AtomicU64,
    label: String,
    connect_timeout: Duration,
    timeout: Duration,
    /// Whether the sentinels are reached over TLS.
    tls: bool,
}

impl SentinelConn {
    /// Asks the sentinels of `config` for the master and connects to it.
    pub(crate) async fn connect(
        config: &SentinelConfig,
        label: &str,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Arc<Self>> {
        let invalid = |e: redis::RedisError| Error::invalid_config(crate::NAME, e.to_string());
        let certificates = crate::tls::certificates(&config.tls)?;
        let addrs = config
            .sentinels
            .iter()
            .map(|(host, port)| match certificates {
                None => ConnectionAddr::Tcp(host.clone(), *port),
                Some(_) => ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                },
            });
        let mut builder =
            SentinelClientBuilder::new(addrs, &config.master, SentinelServerType::Master)
                .map_err(invalid)?;
        // The same trust and client certificate to the sentinels and to the
        // data nodes they name.
        if let Some(certificates) = certificates {
            builder = builder
                .set_client_to_sentinel_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_certificates(certificates.clone())
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_redis_certificates(certificates);
        }
        if let Some(user) = &config.username {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = &config.password {
            builder = builder.set_client_to_redis_password(password.read(crate::NAME)?);
        }
        let sentinels = builder.build().map_err(invalid)?;
        let conn = Arc::new(Self {
            sentinels: tokio::sync::Mutex::new(sentinels),
            master: std::sync::Mutex::new(None),
            resolving: SingleFlight::new(),
            lookups: AtomicU64::new(0),
            label: label.to_owned(),
            connect_timeout,
            timeout,
            tls: config.tls.is_enabled(),
        });
        conn.master().await?;
        Ok(conn)
    }

    /// The same master on connections of their own, with another command
    /// timeout.
    pub(crate) async fn again(
        &self,
        config: &SentinelConfig,
        timeout: Duration,
    ) -> Result<Arc<Self>> {
        Self::connect(config, &self.label, self.connect_timeout, timeout).await
    }

    /// A client of the master the sentinels name now.
    pub(crate) async fn master_client(&self) -> Result<Client> {
        let ask = async { self.sentinels.lock().await.async_get_client().await };
        tokio::time::timeout(self.connect_timeout, ask)
            .await
            .map_err(|_| {
                Error::timeout("asking the sentinels for the master", self.connect_timeout)
            })?
            .map_err(|e| {
                let asking = "ask the sentinels for the master";
                explained(
                    convert(&self.label, asking, self.connect_timeout, e),
                    self.tls,
                )
            })
    }

    fn current(&self) -> Option<(u64, ConnectionManager)> {
        self.master
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The connection to the master, made if there is none (or the
    /// look-up in progress joined), with its look-up's number.
    async fn master(self: &Arc<Self>) -> Result<(u64, ConnectionManager)> {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let this = self.clone();
        let within = 2 * self.connect_timeout;
        self.resolving
            .run("finding the master", within, move || async move {
                // Another command may have looked since this one did.
                if let Some(current) = this.current() {
                    return Ok(current);
                }
                this.look_up().await
            })
            .await
    }

    /// Asks the sentinels for the master and connects to it.
    async fn look_up(&self) -> Result<(u64, ConnectionManager)> {
        let client = self.master_client().await?;
        let Conn::Single(conn) =
            open(&client, &self.label, self.connect_timeout, self.timeout).await?
        else {
            unreachable!("open makes one server's connection");
        };
        let current = (self.lookups.fetch_add(1, Ordering::Relaxed) + 1, conn);
        *self.master.lock().unwrap_or_else(|p| p.into_inner()) = Some(current.clone());
        Ok(current)
    }

    /// Whether `e` may mean the master changed.
    fn after_failover(e: &RedisError) -> bool {
        e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
    }

    /// Drops the connection of look-up `lookup`, unless a later look-up
    /// replaced it already.
    fn forget_master(&self, lookup: u64) {
        let mut master = self.master.lock().unwrap_or_else(|p| p.into_inner());
        if master.as_ref().is_some_and(|(n, _)| *n == lookup) {
            *master = None;
        }
    }

    async fn run<T>(
        self: &Arc<Self>,
        send: impl AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        let (lookup, mut conn) = self.master().await.map_err(|e| {
            RedisError::from((ErrorKind::Io, "no master from the sentinels", e.to_string()))
        })?;
        let out = send(&mut conn).await;
        if let Err(e) = &out
            && Self::after_failover(e)
        {
            self.forget_master(lookup);
        }
        out
    }
}
