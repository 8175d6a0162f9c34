//! `redis://` and `rediss://` URLs, and their cluster and sentinel forms.

mod names;
mod node;
mod options;
mod sentinel;

use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::{Error, Result};

pub use names::{NAME, SCHEMES};
pub use node::{CommonOptions, NodeConfig, ReplicaWait};
pub use options::RedisOptions;
pub use sentinel::SentinelConfig;

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
    /// `redis[s]+sentinel://[user:password@]host:port,host:port,…/MASTER[?options]`
    /// for the master that those Redis Sentinels name `MASTER`, the user
    /// and password being the data nodes'. `rediss` schemes use TLS, as
    /// `tls=true` does (to the sentinels and the data nodes alike).
    pub fn parse(url: &str) -> Result<Self> {
        let (kind, rest) = Kind::of(url);
        let tls_implied = url.starts_with("rediss");
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url, NodeConfig::DEFAULT_TIMEOUT, tls_implied)?;
        if kind == Kind::Cluster {
            return Self::parse_cluster(url, rest, q, common);
        }
        let wait = take_wait(&mut q, url)?;
        q.finish(&[CommonOptions::NAMES, &["wait_replicas", "wait_timeout"]].concat())?;
        let (node, sentinel) = if kind == Kind::Sentinel {
            let sentinel =
                SentinelConfig::parse(url, rest, common.tls.clone(), common.password_file.clone())?;
            let node = NodeConfig::new(&format!("redis://{}", sentinel.label()), &common)?;
            (node, Some(sentinel))
        } else {
            let base = url.split_once('?').map_or(url, |(b, _)| b);
            (NodeConfig::new(base, &common)?, None)
        };
        Ok(Self {
            node,
            cluster: Vec::new(),
            sentinel,
            common,
            wait,
        })
    }

    /// A cluster URL: `rest` is what follows `redis[s]+cluster://`, `q`
    /// the options left after `common`.
    fn parse_cluster(
        url: &str,
        rest: &str,
        q: QueryOptions,
        common: CommonOptions,
    ) -> Result<Self> {
        q.finish(CommonOptions::NAMES).map_err(|e| match e {
            Error::InvalidUrl { url, reason, .. } if reason.contains("wait_") => {
                Error::invalid_url(
                    &url,
                    format!("{reason} (a cluster has no WAIT for replicas)"),
                )
            }
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
            .map(|host| NodeConfig::new(&format!("redis://{credentials}{host}"), &common))
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

/// What a URL's scheme names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Single,
    Cluster,
    Sentinel,
}

impl Kind {
    /// The kind, and what follows `redis[s]+cluster://` or
    /// `redis[s]+sentinel://` (the whole URL for one server).
    fn of(url: &str) -> (Self, &str) {
        for (kind, schemes) in [
            (Kind::Cluster, ["redis+cluster://", "rediss+cluster://"]),
            (Kind::Sentinel, ["redis+sentinel://", "rediss+sentinel://"]),
        ] {
            if let Some(rest) = schemes.iter().find_map(|s| url.strip_prefix(s)) {
                return (kind, rest);
            }
        }
        (Kind::Single, url)
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

#[cfg(test)]
mod tests;
