//! `redlock://h1:p1,h2:p2,h3:p3[/db][?options]` URLs.

use std::time::Duration;

use lock_core::backend::{HostList, QueryOptions};
use lock_core::{Error, Result};
use lock_redis::config::{CommonOptions, NodeConfig};

/// A parsed `redlock://` URL.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedlockConfig {
    /// One entry per independent master.
    pub nodes: Vec<NodeConfig>,
    /// Prefix and timeouts; `timeout` is the per-node limit of each call.
    pub common: CommonOptions,
    /// The longest random delay between two attempts of a waiting acquire.
    pub retry_delay: Duration,
}

impl RedlockConfig {
    /// The per-node call limit unless `timeout` says otherwise: far below any
    /// sensible TTL, so a dead node costs little of a lease's validity.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
    const NAMES: &'static [&'static str] = &["retry_delay", "tls"];

    /// Parses `redlock://[user:password@]host:port,[user:password@]host:port,…[/db][?options]`.
    ///
    /// Each host may carry its own credentials; `tls=true` connects to every
    /// node with TLS (`rediss`).
    pub fn parse(url: &str) -> Result<Self> {
        let HostList { hosts, path, .. } = HostList::parse(url, crate::SCHEMES[0])?;
        let db = Some(path).filter(|p| !p.is_empty());
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url, Self::DEFAULT_NODE_TIMEOUT)?;
        let retry_delay = q
            .take_duration("retry_delay")?
            .unwrap_or(Duration::from_millis(200));
        let tls = q.take_bool("tls", false)?;
        q.finish(&[CommonOptions::NAMES, Self::NAMES].concat())?;

        let scheme = if tls { "rediss" } else { "redis" };
        let nodes = hosts
            .iter()
            .map(|host| {
                let db = db.map(|d| format!("/{d}")).unwrap_or_default();
                NodeConfig::new(&format!("{scheme}://{host}{db}"), &common)
            })
            .collect::<Result<Vec<_>>>()?;
        if nodes.len() < 3 || nodes.len() % 2 == 0 {
            return Err(Error::invalid_url(
                url,
                format!(
                    "Redlock needs an odd number of nodes, 3 or more (5 is usual); got {}",
                    nodes.len()
                ),
            ));
        }
        let mut labels: Vec<&str> = nodes.iter().map(|n| n.label.as_str()).collect();
        labels.sort_unstable();
        if labels.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::invalid_url(
                url,
                "a node is listed twice; Redlock needs independent masters",
            ));
        }
        Ok(Self {
            nodes,
            common,
            retry_delay,
        })
    }

    /// How many nodes make a majority.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_credentials_and_options() {
        let c = RedlockConfig::parse(
            "redlock://a:pw1@h1:1,h2:2,b:pw2@h3:3/4?retry_delay=50ms&prefix=x:",
        )
        .unwrap();
        let labels: Vec<_> = c.nodes.iter().map(|n| n.label.as_str()).collect();
        assert_eq!(labels, ["h1:1", "h2:2", "h3:3"]);
        assert_eq!(c.quorum(), 2);
        assert_eq!(c.common.timeout, RedlockConfig::DEFAULT_NODE_TIMEOUT);
        assert_eq!(c.retry_delay, Duration::from_millis(50));
        assert!(!format!("{c:?}").contains("pw1"));
    }

    #[test]
    fn rejects_even_short_or_repeated_node_lists() {
        lock_core::url::assert_refused(
            RedlockConfig::parse,
            &[
                ("redlock://h1:1,h2:2", "odd number"),
                ("redlock://h1:1,h2:2,h3:3,h4:4", "odd number"),
                ("redlock://h1:1,h1:1,h3:3", "listed twice"),
                ("redlock://h1:1,,h3:3", "empty host"),
                ("redlock://h1:1,h2:2,h3:3?tls=maybe", "true or false"),
            ],
        );
    }
}
