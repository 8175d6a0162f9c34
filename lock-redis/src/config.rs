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
    /// The option names [`CommonOptions::take`] reads.
    pub const NAMES: &'static [&'static str] =
        &["prefix", "timeout", "connect_timeout", "allow_eviction"];
    const DEFAULT_PREFIX: &'static str = "distlock:";

    /// Takes the common options out of `q`; `default_timeout` is the
    /// command timeout when the URL gives none.
    pub fn take(q: &mut QueryOptions, url: &str, default_timeout: Duration) -> Result<Self> {
        let prefix = q
            .take("prefix")
            .unwrap_or_else(|| Self::DEFAULT_PREFIX.to_owned());
        let printable = |c: char| c.is_ascii_graphic() && c != '#';
        if prefix.len() > 64 || !prefix.chars().all(printable) {
            return Err(Error::invalid_url(
                url,
                "option \"prefix\" must be at most 64 printable ASCII characters, without spaces or '#'",
            ));
        }
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

/// Replication the acquire waits for: `WAIT replicas timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaWait {
    /// How many replicas must confirm the grant.
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

/// A parsed `redis://` URL.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The server.
    pub node: NodeConfig,
    /// Prefix and timeouts.
    pub common: CommonOptions,
    /// Opt-in replication check after each grant.
    pub wait: Option<ReplicaWait>,
}

impl RedisConfig {
    /// Parses `redis[s]://[user:password@]host[:port][/db][?options]`.
    pub fn parse(url: &str) -> Result<Self> {
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url, NodeConfig::DEFAULT_TIMEOUT)?;
        let replicas = q.take_parsed::<u32>("wait_replicas", "a whole number")?;
        let wait_timeout = q.take_duration("wait_timeout")?;
        q.finish(&[CommonOptions::NAMES, &["wait_replicas", "wait_timeout"]].concat())?;
        let wait = match (replicas, wait_timeout) {
            (Some(0) | None, None) => None,
            (Some(0) | None, Some(_)) => {
                return Err(Error::invalid_url(
                    url,
                    "option \"wait_timeout\" needs \"wait_replicas\" of 1 or more",
                ));
            }
            (Some(replicas), timeout) => Some(ReplicaWait {
                replicas,
                timeout: timeout.unwrap_or(Duration::from_secs(1)),
            }),
        };
        let base = url.split_once('?').map_or(url, |(b, _)| b);
        Ok(Self {
            node: NodeConfig::new(base, &common)?,
            common,
            wait,
        })
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
}
