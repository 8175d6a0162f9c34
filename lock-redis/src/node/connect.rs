//! Making a node: connecting to one server, a cluster or the master
//! Sentinel names, and checking the server before the first lock (its
//! version, and an eviction policy that could drop lock keys).

use std::time::Duration;

use lock_core::{Error, Result};
use redis::cluster::ClusterClient;
use redis::{Client, Value};

use super::{Node, Source};
use crate::config::sentinel::SentinelConfig;
use crate::config::{RedisConfig, Server};
use crate::conn::{Conn, SentinelConn, open, open_cluster};
use crate::error::unanswered;
use crate::eviction::{self, Eviction, MemoryPolicy};
use crate::keys::Keys;

impl Node {
    /// Connects to `server` with the timeouts, eviction choice and TLS of
    /// `config`.
    pub async fn connect(server: &Server, config: &RedisConfig, keys: Keys) -> Result<Self> {
        let client = server.client(&config.tls)?;
        Self::with_client(
            client,
            server.addr.clone(),
            config.timeout,
            config.connect_timeout,
            config.allow_eviction,
            keys,
        )
        .await
    }

    /// Connects to the server through `client`, a client the application
    /// made: a connection manager of the node's own, each command bounded
    /// by `timeout`, the server's version and memory policy checked as
    /// [`Node::connect`] does. `label` names the server in messages.
    pub async fn with_client(
        client: Client,
        label: String,
        timeout: Duration,
        connect_timeout: Duration,
        allow_eviction: bool,
        keys: Keys,
    ) -> Result<Self> {
        let conn = open(&client, &label, connect_timeout, timeout).await?;
        let times = (timeout, connect_timeout);
        Self::unchecked(conn, Source::Single(client), keys, label, times)
            .checked(allow_eviction)
            .await
    }

    /// A node on `conn` whose server has not been checked yet; `times` is
    /// the command timeout, then the connect timeout.
    fn unchecked(
        conn: Conn,
        source: Source,
        keys: Keys,
        label: String,
        (timeout, connect_timeout): (Duration, Duration),
    ) -> Self {
        Self {
            conn,
            source,
            keys,
            label,
            timeout,
            connect_timeout,
            eviction: Eviction::Unknown,
            client: lock_core::backend::OwnerToken::random().short(),
        }
    }

    /// Connects to the master that the sentinels of `config` name, and
    /// follows it across failovers (see [`SentinelConn`]); checked as
    /// [`Node::connect`] checks its server.
    pub(crate) async fn connect_sentinel(
        config: &SentinelConfig,
        timeout: Duration,
        connect_timeout: Duration,
        allow_eviction: bool,
        keys: Keys,
    ) -> Result<Self> {
        let label = format!("sentinel {}", config.label());
        let sentinel = SentinelConn::connect(config, &label, connect_timeout, timeout).await?;
        let conn = Conn::Sentinel(sentinel.clone());
        let source = Source::Sentinel(sentinel, config.clone());
        Self::unchecked(conn, source, keys, label, (timeout, connect_timeout))
            .checked(allow_eviction)
            .await
    }

    /// The node once its server's version and memory policy passed; in a
    /// cluster, every master's (the most evicting one decides, since a
    /// lock may land on any).
    async fn checked(mut self, allow_eviction: bool) -> Result<Self> {
        // One `INFO` (its default sections include both) answers the
        // version and the memory policy; in a cluster it goes to every
        // master, and the answer maps each to its text.
        let infos: Vec<String> = match self.unless_refused(redis::cmd("INFO")).await? {
            Some(Value::Map(pairs)) => pairs
                .into_iter()
                .filter_map(|(_, info)| redis::from_redis_value(info).ok())
                .collect(),
            Some(other) => redis::from_redis_value::<String>(other)
                .into_iter()
                .collect(),
            None => Vec::new(),
        };
        // A server that refused `INFO` is checked as one without it.
        let answers: Vec<Option<&str>> = match infos.as_slice() {
            [] => vec![None],
            infos => infos.iter().map(|i| Some(i.as_str())).collect(),
        };
        for info in answers {
            self.check_version(info)?;
            let policy = match info.and_then(MemoryPolicy::from_info) {
                Some(policy) => Some(policy),
                None => self.configured_policy().await?,
            };
            let found = eviction::admit(&self.label, allow_eviction, policy.as_ref())?;
            self.eviction = self.eviction.max_with(found);
        }
        Ok(self)
    }

    /// Connects to the Redis Cluster that `client` reaches through its seed
    /// nodes; `keys` must be [hash-tagged](Keys::hash_tagged). Every master
    /// is checked as [`Node::connect`] checks its one server: version and
    /// memory policy (a cluster's masters should all be configured alike;
    /// the most evicting one decides).
    pub async fn connect_cluster(
        client: &ClusterClient,
        config: &RedisConfig,
        keys: Keys,
    ) -> Result<Self> {
        let label = config.topology.label();
        let tls = config.tls.is_enabled();
        let conn = open_cluster(client, &label, config.connect_timeout, tls).await?;
        let times = (config.timeout, config.connect_timeout);
        Self::unchecked(Conn::Cluster(conn), Source::Cluster, keys, label, times)
            .checked(config.allow_eviction)
            .await
    }

    /// How messages name the server `client` reaches: `host:port`, or the
    /// socket's path.
    pub fn label_of(client: &Client) -> String {
        client.get_connection_info().addr().to_string()
    }

    /// Runs an administrative command that the server may refuse (an ACL
    /// user without it, a managed service that renamed it): `None` when it
    /// answered with an error, `Err` when it did not answer at all.
    async fn unless_refused<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<Option<T>> {
        match cmd.query_async(&mut self.conn.clone()).await {
            Ok(value) => Ok(Some(value)),
            Err(e) if unanswered(&e) => Err(self.fail("connect", e)),
            Err(e) => {
                tracing::debug!(server = self.label, error = %e, "redis refused a command at connect");
                Ok(None)
            }
        }
    }

    /// Refuses a server too old for the scripts, which would otherwise fail
    /// every acquire with a bare syntax error. A server that hides `INFO`
    /// (some managed services rename it) is given the benefit of the doubt.
    fn check_version(&self, info: Option<&str>) -> Result<()> {
        match info.and_then(server_version) {
            Some(found) if found < MIN_VERSION => Err(Error::backend(format!(
                "{} runs Redis {}.{}; distlock needs {}.{} or newer (its acquire script uses PEXPIRETIME)",
                self.label, found.0, found.1, MIN_VERSION.0, MIN_VERSION.1
            ))),
            _ => Ok(()),
        }
    }

    /// The memory policy from `CONFIG GET`, for a server that refused
    /// `INFO`; `None` if it refuses this too.
    async fn configured_policy(&self) -> Result<Option<MemoryPolicy>> {
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("maxmemory").arg("maxmemory-policy");
        let pairs: Option<Vec<String>> = self.unless_refused(get).await?;
        Ok(pairs.as_deref().and_then(MemoryPolicy::from_config))
    }

    /// The same server on a connection of its own whose commands may take
    /// `extra` longer than the timeout: for [`Node::confirmed`], whose
    /// `WAIT` holds its connection until the replicas answer, and would
    /// hold up every command queued behind it.
    pub(crate) async fn with_own_connection(&self, extra: Duration) -> Result<Self> {
        let conn = match &self.source {
            Source::Single(client) => {
                open(
                    client,
                    &self.label,
                    self.connect_timeout,
                    self.timeout + extra,
                )
                .await?
            }
            Source::Sentinel(sentinel, config) => {
                Conn::Sentinel(sentinel.again(config, self.timeout + extra).await?)
            }
            Source::Cluster => {
                return Err(Error::unsupported(
                    crate::NAME,
                    "a connection of its own to one node of a cluster",
                ));
            }
        };
        Ok(Self {
            conn,
            timeout: self.timeout + extra,
            ..self.clone()
        })
    }
}

/// The oldest Redis with every command the scripts use (`PEXPIRETIME`).
const MIN_VERSION: (u32, u32) = (7, 0);

/// `(major, minor)` from the `redis_version:` line of `INFO server`.
fn server_version(info: &str) -> Option<(u32, u32)> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))?;
    let mut parts = version.trim().split('.').map(str::parse::<u32>);
    Some((parts.next()?.ok()?, parts.next()?.ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_version_reads_the_info_line() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(server_version(info), Some((7, 0)));
        assert!(server_version("redis_version:6.2.14\r\n").unwrap() < MIN_VERSION);
        assert!(server_version("redis_version:7.0.0\r\n").unwrap() >= MIN_VERSION);
        assert_eq!(server_version("# Server\r\n"), None);
    }
}
