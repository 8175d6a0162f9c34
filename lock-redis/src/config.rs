//! `redis://` and `rediss://` URLs.

use std::fmt;
use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::url::{host_with_port, redact};
use lock_core::{Error, Result};

/// How to reach one Redis server. `Debug` never shows the password.
#[derive(Clone)]
#[non_exhaustive]
pub struct NodeConfig {
    /// The URL handed to the driver: scheme, credentials, host, port, database.
    url: String,
    /// `host:port`, for messages.
    pub label: String,
    /// The longest wait for any one command's answer.
    pub timeout: Duration,
    /// The longest wait for a connection.
    pub connect_timeout: Duration,
    /// Whether to use a server that may evict lock keys (see
    /// `Eviction`).
    pub allow_eviction: bool,
}

impl NodeConfig {
    /// The default command timeout: far below any sensible TTL.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

    /// A node at `url` (`redis[s]://[user:password@]host[:port][/db]`, no
    /// query string), with the timeouts and eviction choice of `common`.
    pub fn new(url: &str, common: &CommonOptions) -> Result<Self> {
        let rest = url
            .strip_prefix("redis://")
            .or_else(|| url.strip_prefix("rediss://"))
            .ok_or_else(|| Error::invalid_url(url, "expected redis:// or rediss://"))?;
        let authority = rest.split('/').next().unwrap_or_default();
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let label = host_with_port(url, host, 6379, "redis://HOST[:PORT][/DB]")?;
        Ok(Self {
            url: url.to_owned(),
            label,
            timeout: common.timeout,
            connect_timeout: common.connect_timeout,
            allow_eviction: common.allow_eviction,
        })
    }

    /// The URL the driver connects to, credentials included (so print
    /// `label`, not this): for opening a `redis::Client` of one's own to
    /// the same server.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The driver refused the URL.
    pub(crate) fn invalid(&self, e: redis::RedisError) -> Error {
        Error::invalid_url(&self.url, e.to_string())
    }
}

impl fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeConfig")
            .field("url", &redact(&self.url))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("allow_eviction", &self.allow_eviction)
            .finish()
    }
}

/// Options shared by every Redis-based backend (Redis and Redlock).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CommonOptions {
    /// Prefix of every key.
    pub prefix: String,
    /// Command timeout.
    pub timeout: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Use a server whose memory policy may evict lock keys (refused
    /// otherwise).
    pub allow_eviction: bool,
}

impl CommonOptions {
    /// Options given in code rather than in a URL, checked as a URL's are;
    /// errors name the option as a URL would give it.
    pub fn new(
        prefix: impl Into<String>,
        timeout: Duration,
        connect_timeout: Duration,
        allow_eviction: bool,
    ) -> Result<Self> {
        let prefix = prefix.into();
        check_prefix(&prefix, &format!("?prefix={prefix}"))?;
        for (option, value) in [("timeout", timeout), ("connect_timeout", connect_timeout)] {
            if value.is_zero() {
                return Err(Error::invalid_url(
                    &format!("?{option}=0s"),
                    format!("option \"{option}\" must be more than zero"),
                ));
            }
        }
        Ok(Self {
            prefix,
            timeout,
            connect_timeout,
            allow_eviction,
        })
    }

    /// The option names [`CommonOptions::take`] reads.
    pub const NAMES: &'static [&'static str] =
        &["prefix", "timeout", "connect_timeout", "allow_eviction"];
    /// The key prefix unless one is given.
    pub const DEFAULT_PREFIX: &'static str = "distlock:";

    /// Takes the common options out of `q`; `default_timeout` is the
    /// command timeout when the URL gives none.
    pub fn take(q: &mut QueryOptions, url: &str, default_timeout: Duration) -> Result<Self> {
        let prefix = q
            .take("prefix")
            .unwrap_or_else(|| Self::DEFAULT_PREFIX.to_owned());
        check_prefix(&prefix, url)?;
        let timeout = q.take_positive_duration("timeout", default_timeout)?;
        let connect_timeout =
            q.take_positive_duration("connect_timeout", NodeConfig::DEFAULT_TIMEOUT)?;
        let allow_eviction = q.take_bool("allow_eviction", false)?;
        Ok(Self {
            prefix,
            timeout,
            connect_timeout,
            allow_eviction,
        })
    }
}

/// Refuses a key prefix that could make two names share a key (or a lock
/// key somebody's fence key): at most 64 printable ASCII characters,
/// without spaces or `#`. `url` is for the message.
fn check_prefix(prefix: &str, url: &str) -> Result<()> {
    let printable = |c: char| c.is_ascii_graphic() && c != '#';
    if prefix.len() > 64 || !prefix.chars().all(printable) {
        return Err(Error::invalid_url(
            url,
            "option \"prefix\" must be at most 64 printable ASCII characters, without spaces or '#'",
        ));
    }
    Ok(())
}

/// Replication the acquire waits for: `WAIT replicas timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaWait {
    /// How many replicas must confirm the grant.
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

/// A parsed `redis://` or `redis+cluster://` URL.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The server; for a cluster, the first seed node.
    pub node: NodeConfig,
    /// A Redis Cluster's seed nodes, in the URL's order; empty for one
    /// server.
    pub cluster: Vec<NodeConfig>,
    /// The sentinels that name the master, for `redis+sentinel://`.
    pub sentinel: Option<SentinelConfig>,
    /// Prefix and timeouts.
    pub common: CommonOptions,
    /// Opt-in replication check after each grant.
    pub wait: Option<ReplicaWait>,
}

impl RedisConfig {
    /// Parses `redis[s]://[user:password@]host[:port][/db][?options]`;
    /// `redis[s]+cluster://[user:password@]host:port,host:port,…[?options]`
    /// for a Redis Cluster reached through those seed nodes (any of its
    /// nodes; the client learns the rest); or
    /// `redis+sentinel://[user:password@]host:port,host:port,…/MASTER[?options]`
    /// for the master that those Redis Sentinels name `MASTER`, the user
    /// and password being the data nodes'.
    pub fn parse(url: &str) -> Result<Self> {
        if let Some((scheme, rest)) = url
            .strip_prefix("redis+cluster://")
            .map(|r| ("redis", r))
            .or_else(|| url.strip_prefix("rediss+cluster://").map(|r| ("rediss", r)))
        {
            return Self::parse_cluster(url, scheme, rest);
        }
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url, NodeConfig::DEFAULT_TIMEOUT)?;
        let wait = take_wait(&mut q, url)?;
        q.finish(&[CommonOptions::NAMES, &["wait_replicas", "wait_timeout"]].concat())?;
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            let sentinel = SentinelConfig::parse(url, rest)?;
            let node = NodeConfig::new(&format!("redis://{}", sentinel.label()), &common)?;
            return Ok(Self {
                node,
                cluster: Vec::new(),
                sentinel: Some(sentinel),
                common,
                wait,
            });
        }
        let base = url.split_once('?').map_or(url, |(b, _)| b);
        Ok(Self {
            node: NodeConfig::new(base, &common)?,
            cluster: Vec::new(),
            sentinel: None,
            common,
            wait,
        })
    }

    /// A cluster URL: `rest` is what follows `scheme+cluster://`.
    fn parse_cluster(url: &str, scheme: &str, rest: &str) -> Result<Self> {
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url, NodeConfig::DEFAULT_TIMEOUT)?;
        q.finish(CommonOptions::NAMES).map_err(|e| match e {
            Error::InvalidUrl { url, reason } if reason.contains("wait_") => Error::InvalidUrl {
                url,
                reason: format!("{reason} (a cluster has no WAIT for replicas)"),
            },
            e => e,
        })?;
        if common.prefix.contains(['{', '}']) {
            return Err(Error::invalid_url(
                url,
                "option \"prefix\" may not contain '{' or '}' in a cluster: the lock name is each key's hash tag",
            ));
        }
        let base = rest.split_once('?').map_or(rest, |(b, _)| b);
        let (credentials, hosts) = match base.rsplit_once('@') {
            Some((c, h)) => (format!("{c}@"), h),
            None => (String::new(), base),
        };
        if hosts.contains('/') {
            return Err(Error::invalid_url(
                url,
                "a cluster has only database 0: expected redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…",
            ));
        }
        let cluster = hosts
            .split(',')
            .map(|host| NodeConfig::new(&format!("{scheme}://{credentials}{host}"), &common))
            .collect::<Result<Vec<_>>>()?;
        let Some(node) = cluster.first().cloned() else {
            return Err(Error::invalid_url(url, "no seed node"));
        };
        Ok(Self {
            node,
            cluster,
            sentinel: None,
            common,
            wait: None,
        })
    }

    /// Whether the URL names a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        !self.cluster.is_empty()
    }
}

/// `wait_replicas` and `wait_timeout`.
fn take_wait(q: &mut QueryOptions, url: &str) -> Result<Option<ReplicaWait>> {
    let replicas = q.take_parsed::<u32>("wait_replicas", "a whole number")?;
    let wait_timeout = q.take_duration("wait_timeout")?;
    match (replicas, wait_timeout) {
        (Some(0) | None, None) => Ok(None),
        (Some(0) | None, Some(_)) => Err(Error::invalid_url(
            url,
            "option \"wait_timeout\" needs \"wait_replicas\" of 1 or more",
        )),
        (Some(replicas), timeout) => Ok(Some(ReplicaWait {
            replicas,
            timeout: timeout.unwrap_or(Duration::from_secs(1)),
        })),
    }
}

/// Where Redis Sentinel is asked for the master. `Debug` never shows the
/// password.
#[derive(Clone)]
#[non_exhaustive]
pub struct SentinelConfig {
    /// The sentinels, `(host, port)`.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels know the master by.
    pub master: String,
    /// The data nodes' user, if any.
    pub username: Option<String>,
    pub(crate) password: Option<String>,
    /// The URL without its password, for messages.
    pub(crate) redacted: String,
}

impl SentinelConfig {
    /// `rest` is what follows `redis+sentinel://`.
    fn parse(url: &str, rest: &str) -> Result<Self> {
        let shape = "expected redis+sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…/MASTER_NAME";
        let base = rest.split_once('?').map_or(rest, |(b, _)| b);
        let (authority, master) = base
            .split_once('/')
            .filter(|(_, m)| !m.is_empty() && !m.contains('/'))
            .ok_or_else(|| Error::invalid_url(url, format!("no master name: {shape}")))?;
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|d| d.into_owned())
                .map_err(|_| Error::invalid_url(url, "credentials are not UTF-8"))
        };
        let (username, password) = match credentials {
            None => (None, None),
            Some(c) => match c.split_once(':') {
                Some((u, p)) => (
                    (!u.is_empty()).then(|| decode(u)).transpose()?,
                    Some(decode(p)?),
                ),
                None => (Some(decode(c)?), None),
            },
        };
        let sentinels = hosts
            .split(',')
            .map(|h| {
                let label = host_with_port(url, h, 26379, shape)?;
                let (host, port) = label.rsplit_once(':').unwrap_or((&label, "26379"));
                let port = port.parse().map_err(|_| {
                    Error::invalid_url(url, format!("bad port in \"{h}\": {shape}"))
                })?;
                Ok((host.trim_matches(['[', ']']).to_owned(), port))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            sentinels,
            master: decode(master)?,
            username,
            password,
            redacted: redact(url),
        })
    }

    /// `master@host:port,…`, for messages.
    pub fn label(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        format!("{}@{}", self.master, hosts.join(","))
    }
}

impl fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The options of a backend made with
/// [`RedisBackend::from_client`](crate::RedisBackend::from_client): a
/// `redis://` URL's options, with the same defaults and checks, for a
/// `redis::Client` the application made.
///
/// ```
/// use std::time::Duration;
/// use lock_redis::config::RedisOptions;
///
/// let options = RedisOptions::new()
///     .prefix("billing:")
///     .timeout(Duration::from_millis(500))
///     .wait_replicas(1, Duration::from_secs(1));
/// ```
#[derive(Clone, Debug)]
pub struct RedisOptions {
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    allow_eviction: bool,
    wait: Option<ReplicaWait>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: CommonOptions::DEFAULT_PREFIX.to_owned(),
            timeout: NodeConfig::DEFAULT_TIMEOUT,
            connect_timeout: NodeConfig::DEFAULT_TIMEOUT,
            allow_eviction: false,
            wait: None,
        }
    }
}

impl RedisOptions {
    /// The defaults: prefix `distlock:`, 2 s timeouts, no eviction, no
    /// `WAIT`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Prefix of every key and of the release channel (URL option
    /// `prefix`): at most 64 printable ASCII characters, without spaces or
    /// `#`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The longest wait for any command's answer (URL option `timeout`),
    /// whatever the client's own settings; more than zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest wait for each connection the backend opens from the
    /// client (URL option `connect_timeout`); more than zero.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether to use a server whose memory policy may evict lock keys
    /// (URL option `allow_eviction`; see the crate docs).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Makes every grant wait until `replicas` replicas have it, for at
    /// most `timeout` (URL options `wait_replicas` and `wait_timeout`); 0
    /// replicas turns it off.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = (replicas > 0).then_some(ReplicaWait { replicas, timeout });
        self
    }

    /// The options, checked as a URL's are; errors name the option as a
    /// URL would give it.
    pub(crate) fn check(self) -> Result<(CommonOptions, Option<ReplicaWait>)> {
        let common = CommonOptions::new(
            self.prefix,
            self.timeout,
            self.connect_timeout,
            self.allow_eviction,
        )?;
        Ok((common, self.wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options_and_keeps_the_password_out_of_debug() {
        let c = RedisConfig::parse(
            "redis://app:s3cret@127.0.0.1:7000/2?prefix=svc:&timeout=250ms&wait_replicas=1",
        )
        .unwrap();
        assert_eq!(c.node.label, "127.0.0.1:7000");
        assert_eq!(c.common.prefix, "svc:");
        assert_eq!(c.common.timeout, Duration::from_millis(250));
        assert_eq!(
            c.wait,
            Some(ReplicaWait {
                replicas: 1,
                timeout: Duration::from_secs(1)
            })
        );
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(!c.node.allow_eviction, "refused unless asked for");
        let allowed = RedisConfig::parse("redis://h?allow_eviction=true").unwrap();
        assert!(allowed.node.allow_eviction);
        assert_eq!(
            RedisConfig::parse("redis://h").unwrap().node.label,
            "h:6379"
        );
    }

    #[test]
    fn options_are_checked_as_a_url_is() {
        let (common, wait) = RedisOptions::new()
            .prefix("svc:")
            .allow_eviction(true)
            .wait_replicas(2, Duration::from_millis(300))
            .check()
            .unwrap();
        assert_eq!(common.prefix, "svc:");
        assert!(common.allow_eviction);
        assert_eq!(common.timeout, NodeConfig::DEFAULT_TIMEOUT);
        assert_eq!(wait.map(|w| w.replicas), Some(2));
        let defaults = RedisOptions::new().check().unwrap().0;
        assert_eq!(defaults.prefix, CommonOptions::DEFAULT_PREFIX);
        for (options, expected) in [
            (RedisOptions::new().prefix("a b"), "prefix"),
            (RedisOptions::new().prefix("a#"), "prefix"),
            (RedisOptions::new().timeout(Duration::ZERO), "\"timeout\""),
            (
                RedisOptions::new().connect_timeout(Duration::ZERO),
                "connect_timeout",
            ),
        ] {
            let err = options.check().unwrap_err();
            assert!(
                err.is_invalid_input() && err.to_string().contains(expected),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        lock_core::url::assert_refused(
            RedisConfig::parse,
            &[
                ("redis://h?prefix=a b", "prefix"),
                ("redis://h?timeout=0s", "more than zero"),
                ("redis://h?wait_timeout=1s", "needs \"wait_replicas\""),
                ("redis://h?nope=1", "accepted options"),
                ("redis://h?allow_eviction=yes", "true or false"),
                ("redis://", "no host"),
            ],
        );
    }

    #[test]
    fn cluster_urls_name_seed_nodes_with_shared_credentials() {
        let c = RedisConfig::parse(
            "redis+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001?prefix=svc:&timeout=300ms",
        )
        .unwrap();
        assert!(c.is_cluster() && c.sentinel.is_none());
        let labels: Vec<&str> = c.cluster.iter().map(|n| n.label.as_str()).collect();
        assert_eq!(labels, ["10.0.0.1:7000", "10.0.0.2:7001"]);
        assert_eq!(c.cluster[1].url(), "redis://app:s3cret@10.0.0.2:7001");
        assert_eq!(c.common.timeout, Duration::from_millis(300));
        assert!(!format!("{c:?}").contains("s3cret"));
        let tls = RedisConfig::parse("rediss+cluster://h:1").unwrap();
        assert_eq!(tls.cluster[0].url(), "rediss://h:1");
        for (url, expected) in [
            ("redis+cluster://h:1?wait_replicas=1", "WAIT"),
            ("redis+cluster://h:1?prefix=a{b}", "prefix"),
            ("redis+cluster://h:1/2", "database 0"),
        ] {
            let err = RedisConfig::parse(url).unwrap_err();
            assert!(
                err.is_invalid_input() && err.to_string().contains(expected),
                "{url}: {err}"
            );
        }
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        let c = RedisConfig::parse(
            "redis+sentinel://app:s3cret@127.0.0.1:26379,127.0.0.2/mymaster?wait_replicas=1",
        )
        .unwrap();
        let s = c.sentinel.as_ref().unwrap();
        assert_eq!(
            s.sentinels,
            [
                ("127.0.0.1".to_owned(), 26379),
                ("127.0.0.2".to_owned(), 26379)
            ]
        );
        assert_eq!(s.master, "mymaster");
        assert_eq!(s.username.as_deref(), Some("app"));
        assert_eq!(s.password.as_deref(), Some("s3cret"));
        assert_eq!(c.wait.map(|w| w.replicas), Some(1));
        assert!(!format!("{c:?}").contains("s3cret"));
        for url in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1:x/m",
        ] {
            let err = RedisConfig::parse(url).unwrap_err();
            assert!(err.is_invalid_input(), "{url}: {err}");
            assert!(!err.to_string().contains("s3cret"));
        }
    }
}
