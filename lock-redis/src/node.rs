//! One Redis server: its connection and the lock operations on it. Redlock
//! runs the same operations on each of its nodes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, millis};
use lock_core::{Error, FencingToken, LockKind, LockName, OwnerToken, Result};
use redis::cluster::ClusterClient;
use redis::{Client, ErrorKind, RedisError, ScriptInvocation, ServerErrorKind, Value};

use crate::config::{CommonOptions, NodeConfig, SentinelConfig};
use crate::conn::{Conn, SentinelConn, open, open_cluster};
use crate::error::{convert, unanswered};
use crate::eviction::{self, Eviction, MemoryPolicy};
use crate::scripts::{
    ACQUIRE_SCRIPT, HOLDER_SCRIPT, RELEASE, RELEASE_UNANNOUNCED, RENEW_SCRIPT, eval,
};

/// The keys of one lock name under a prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    /// How long a failed attempt marks the name as waited on; zero for no
    /// mark.
    waiting_mark: Duration,
    /// Whether the name is a hash tag (`{name}`), so that every key of one
    /// lock lands in one cluster slot.
    tagged: bool,
}

impl Keys {
    /// Keys under `prefix` (e.g. `distlock:`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            waiting_mark: Self::WAITING_MARK,
            tagged: false,
        }
    }

    /// The same keys for a Redis Cluster: the name in each key is a hash
    /// tag, `prefix{name}`, `prefix{name}#fence`, `prefix{name}#waiting`,
    /// so the scripts touch one slot and stay atomic; and each name's
    /// releases are announced on a shard channel of that slot
    /// ([`Keys::release_channel`]).
    pub fn hash_tagged(self) -> Self {
        Self {
            tagged: true,
            ..self
        }
    }

    /// The name as it appears in keys: a hash tag in a cluster.
    fn key_name(&self, name: &LockName) -> String {
        if self.tagged {
            format!("{}{{{name}}}", self.prefix)
        } else {
            format!("{}{name}", self.prefix)
        }
    }

    /// The same keys for a client that nobody wakes by pub/sub (Redlock
    /// waits by retrying): failed attempts set no waiting mark, so they
    /// write nothing and releases publish nothing.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub fn without_waiting_mark(self) -> Self {
        Self {
            waiting_mark: Duration::ZERO,
            ..self
        }
    }

    /// The lock key: the prefix and the name, holding only the owner token.
    pub fn lock(&self, name: &LockName) -> String {
        self.key_name(name)
    }

    /// The fence counter. `#` is not allowed in lock names, so no lock key
    /// can ever be somebody's fence key.
    pub fn fence(&self, name: &LockName) -> String {
        format!("{}#fence", self.key_name(name))
    }

    /// Set by a failed attempt, for as long as [`Keys::WAITING_MARK`]: while
    /// it exists, a release of the name is announced. Uncontended locks so
    /// publish nothing.
    pub fn waiting(&self, name: &LockName) -> String {
        format!("{}#waiting", self.key_name(name))
    }

    /// How long one failed attempt marks a name as waited on: longer than a
    /// waiter's longest pause between attempts, which renews it.
    pub const WAITING_MARK: Duration = Duration::from_secs(2);

    /// How long a failed attempt marks a name as waited on here (zero: no
    /// mark, see [`Keys::without_waiting_mark`]).
    pub fn waiting_mark(&self) -> Duration {
        self.waiting_mark
    }

    /// The pub/sub channel on which releases are announced, name as payload.
    pub fn channel(&self) -> String {
        format!("{}released", self.prefix)
    }

    /// Where a release of `name` is announced, and with which command: the
    /// one [`Keys::channel`] by `PUBLISH` on one server; in a cluster, a
    /// shard channel of the lock's own slot by `SPUBLISH`, which only the
    /// nodes serving that slot carry, where `PUBLISH` would go to every
    /// node of the cluster.
    pub fn release_channel(&self, name: &LockName) -> (String, &'static str) {
        if self.tagged {
            (format!("{}#released", self.key_name(name)), "SPUBLISH")
        } else {
            (self.channel(), "PUBLISH")
        }
    }
}

/// A connection to one Redis server that reconnects by itself, with a
/// response timeout on every command.
#[derive(Clone)]
pub struct Node {
    conn: Conn,
    /// Where more connections to the same server come from.
    source: Source,
    keys: Keys,
    label: String,
    timeout: Duration,
    connect_timeout: Duration,
    eviction: Eviction,
}

/// Where a node's connections come from.
#[derive(Clone)]
enum Source {
    /// One server's client.
    Single(Client),
    /// A cluster: its one connection routes every command.
    Cluster,
    /// The master that these sentinels name.
    Sentinel(Arc<SentinelConn>, SentinelConfig),
}

/// A client of the server that releases are announced on, for a
/// subscription connection: one server's, or the master Sentinel names
/// now.
#[derive(Clone)]
pub(crate) enum SubscribeTo {
    Single(Box<Client>),
    Sentinel(Arc<SentinelConn>),
}

impl SubscribeTo {
    /// The client to subscribe through now.
    pub(crate) async fn client(&self) -> Result<Client> {
        match self {
            SubscribeTo::Single(client) => Ok((**client).clone()),
            SubscribeTo::Sentinel(sentinel) => sentinel.master_client().await,
        }
    }
}

/// What [`Node::holder`] found.
#[derive(Debug)]
pub struct NodeHolder {
    /// The lock key's value: an owner token, or whatever another client set.
    pub owner: String,
    /// Time left on the key.
    pub remaining: Duration,
    /// The fence counter now.
    pub counter: u64,
}

impl Node {
    /// Connects to the server `config` names.
    pub async fn connect(config: &NodeConfig, keys: Keys) -> Result<Self> {
        let client = config.client()?;
        Self::with_client(
            client,
            config.label.clone(),
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
        label: String,
        common: &CommonOptions,
        keys: Keys,
    ) -> Result<Self> {
        let tls = common.tls.is_enabled();
        let conn = open_cluster(client, &label, common.connect_timeout, tls).await?;
        let times = (common.timeout, common.connect_timeout);
        Self::unchecked(Conn::Cluster(conn), Source::Cluster, keys, label, times)
            .checked(common.allow_eviction)
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
            Some(found) if found < MIN_VERSION => Err(Error::Backend {
                message: format!(
                    "{} runs Redis {}.{}; distlock needs {}.{} or newer (its acquire script uses PEXPIRETIME)",
                    self.label, found.0, found.1, MIN_VERSION.0, MIN_VERSION.1
                ),
                source: None,
            }),
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

    /// Which keys the server may evict, as read at connect (a server whose
    /// policy changes later is not noticed).
    pub fn eviction(&self) -> Eviction {
        self.eviction
    }

    /// Whether this node follows a failover to a replica (a cluster's
    /// slots, the master Sentinel names), which may lack the last writes.
    pub(crate) fn fails_over(&self) -> bool {
        !matches!(self.source, Source::Single(_))
    }

    /// Where a subscription to release notices connects; `None` for a
    /// cluster, whose notices go by shard channel.
    pub(crate) fn subscribe_to(&self) -> Option<SubscribeTo> {
        match &self.source {
            Source::Single(client) => Some(SubscribeTo::Single(Box::new(client.clone()))),
            Source::Sentinel(sentinel, _) => Some(SubscribeTo::Sentinel(sentinel.clone())),
            Source::Cluster => None,
        }
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// `host:port`, for messages.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Takes the lock for `owner` if it is free (or already `owner`'s);
    /// returns the fencing token, or `None` if somebody else holds it.
    pub async fn acquire(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<FencingToken>> {
        let token: u64 = self
            .run(self.acquire_invocation(name, owner, ttl), "acquire")
            .await?;
        Ok((token > 0).then_some(FencingToken::new(token)))
    }

    /// Takes the lock for `owner` if it is free with a bare
    /// `SET key owner NX PX ttl`, and reads the server's clock (`TIME`) in
    /// the same pipeline; returns that time in microseconds as the token,
    /// or `None` if the key exists.
    ///
    /// A Lua script costs the server several times what these two commands
    /// do, which Redlock pays on every master; its tokens are best effort
    /// anyway, so it takes this one. The clock alone orders two grants of
    /// one name on one server, as long as the clock does not go back: the
    /// second `SET` can only follow the first holder's release, which came
    /// after the first reply. The token survives a restart that loses
    /// every key, but there is no counter to read it back from
    /// ([`Node::holder`]'s `counter` is not it), and the same owner asking
    /// again is refused like anybody else.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub async fn acquire_stamped(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<FencingToken>> {
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(self.keys.lock(name))
            .arg(owner.to_hex())
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl))
            .cmd("TIME");
        let (set, (seconds, micros)): (Option<String>, (u64, u64)) = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail("acquire", e))?;
        Ok(set.map(|_| FencingToken::new(seconds * 1_000_000 + micros)))
    }

    /// Grants `req` of any kind if it is free (or already `req.owner`'s):
    /// the lock's token, or `None` if it is held.
    pub async fn grant(&self, req: &AcquireRequest) -> Result<Option<FencingToken>> {
        if req.kind == LockKind::Exclusive {
            return self.acquire(&req.name, req.owner, req.ttl).await;
        }
        let token: u64 = self.run(self.join_invocation(req), "acquire").await?;
        Ok((token > 0).then_some(FencingToken::new(token)))
    }

    /// Runs a script on this node's connection.
    pub(crate) async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: ScriptInvocation<'_>,
        operation: &'static str,
    ) -> Result<T> {
        invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail(operation, e))
    }

    pub(crate) fn acquire_invocation(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
    ) -> ScriptInvocation<'static> {
        let mut invocation = ACQUIRE_SCRIPT.prepare_invoke();
        invocation
            .key(self.keys.lock(name))
            .key(self.keys.fence(name))
            .key(self.keys.waiting(name))
            .arg(owner.to_hex())
            .arg(millis(ttl))
            .arg(millis(self.keys.waiting_mark));
        invocation
    }

    /// `invocation` followed by `WAIT replicas timeout`, sent as one
    /// pipeline on one connection: `WAIT` then counts the replicas that
    /// have the script's write. Sent separately, a reconnect between the
    /// two would put `WAIT` on a connection that wrote nothing, which every
    /// replica has "acknowledged"; in one pipeline, a lost connection fails
    /// both. Returns the script's answer and how many replicas confirmed.
    pub(crate) async fn confirmed<T: redis::FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        (replicas, timeout): (u32, Duration),
        operation: &'static str,
    ) -> Result<(T, u32)> {
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation)
            .cmd("WAIT")
            .arg(replicas)
            .arg(millis(timeout));
        let mut conn = self.conn.clone();
        let mut sent = pipe.query_async(&mut conn).await;
        if matches!(&sent, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            // A restarted server forgot the script; the failed `EVALSHA`
            // wrote nothing.
            invocation
                .load_async(&mut conn)
                .await
                .map_err(|e| self.fail(operation, e))?;
            sent = pipe.query_async(&mut conn).await;
        }
        sent.map_err(|e| self.fail(operation, e))
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
                return Err(Error::Unsupported {
                    backend: crate::NAME,
                    operation: "a connection of its own to one node of a cluster",
                });
            }
        };
        Ok(Self {
            conn,
            timeout: self.timeout + extra,
            ..self.clone()
        })
    }

    /// Extends the lock if `owner` still holds it.
    pub async fn renew(&self, name: &LockName, owner: OwnerToken, ttl: Duration) -> Result<bool> {
        let done: i64 = self
            .run(self.renew_invocation(name, owner, ttl), "renew")
            .await?;
        Ok(done == 1)
    }

    pub(crate) fn renew_invocation(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
    ) -> ScriptInvocation<'static> {
        let mut invocation = RENEW_SCRIPT.prepare_invoke();
        invocation
            .key(self.keys.lock(name))
            .arg(owner.to_hex())
            .arg(millis(ttl));
        invocation
    }

    /// Deletes the lock if `owner` holds it, and announces the release; as
    /// one `EVAL`, like every cleanup ([`eval`]).
    ///
    /// Without waiting marks (Redlock), nothing is announced, and the
    /// script is the bare compare-and-delete.
    pub async fn release(&self, name: &LockName, owner: OwnerToken) -> Result<bool> {
        let lock = self.keys.lock(name);
        let cleanup = if self.keys.waiting_mark.is_zero() {
            let mut cmd = eval(RELEASE_UNANNOUNCED, &[lock]);
            cmd.arg(owner.to_hex());
            cmd
        } else {
            let (channel, publish) = self.keys.release_channel(name);
            let mut cmd = eval(RELEASE, &[lock, self.keys.waiting(name)]);
            cmd.arg(owner.to_hex())
                .arg(channel)
                .arg(name.as_str())
                .arg(publish);
            cmd
        };
        let done: i64 = self.clean_up(cleanup, "release").await?;
        Ok(done == 1)
    }

    /// Sends a cleanup made by [`eval`] on this node's connection.
    pub(crate) async fn clean_up(
        &self,
        cleanup: redis::Cmd,
        operation: &'static str,
    ) -> Result<i64> {
        cleanup
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail(operation, e))
    }

    /// Whether `owner` holds the lock: its key is there, unexpired, with
    /// `owner` as its value.
    pub async fn holds(&self, name: &LockName, owner: OwnerToken) -> Result<bool> {
        let value: Option<String> = redis::cmd("GET")
            .arg(self.keys.lock(name))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail("check the owner", e))?;
        Ok(value.is_some_and(|v| v == owner.to_hex()))
    }

    /// The current holder, if any.
    pub async fn holder(&self, name: &LockName) -> Result<Option<NodeHolder>> {
        let reply: Vec<String> = HOLDER_SCRIPT
            .key(self.keys.lock(name))
            .key(self.keys.fence(name))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail("holder", e))?;
        let [owner, pttl, counter] = reply.as_slice() else {
            return Ok(None);
        };
        Ok(Some(NodeHolder {
            owner: owner.clone(),
            remaining: Duration::from_millis(pttl.parse::<u64>().unwrap_or(0)),
            counter: counter.parse().unwrap_or(0),
        }))
    }
}

impl Node {
    fn fail(&self, operation: &'static str, e: RedisError) -> Error {
        convert(&self.label, operation, self.timeout, e)
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client's connection info holds the password: never print it.
        let (server, keys) = (&self.label, &self.keys);
        write!(f, "Node {{ server: {server:?}, keys: {keys:?}, .. }}")
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
