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
    const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
    const NAMES: &'static [&'static str] = &["retry_delay"];

    /// Parses `redlock://[user:password@]host:port,[user:password@]host:port,…[/db][?options]`.
    ///
    /// Each host may carry its own credentials; `tls=true` (or `tls_ca`,
    /// `tls_cert` and `tls_key`) connects to every master with TLS, with
    /// the same CA and client certificate.
    pub fn parse(url: &str) -> Result<Self> {
        let HostList { hosts, path, .. } = HostList::parse(url, crate::SCHEMES[0])?;
        let db = Some(path).filter(|p| !p.is_empty());
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url, Self::DEFAULT_NODE_TIMEOUT, false)?;
        let retry_delay = q
            .take_duration("retry_delay")?
            .unwrap_or(Self::DEFAULT_RETRY_DELAY);
        q.finish(&[CommonOptions::NAMES, Self::NAMES].concat())?;

        let nodes = hosts
            .iter()
            .map(|host| {
                let db = db.map(|d| format!("/{d}")).unwrap_or_default();
                NodeConfig::new(&format!("redis://{host}{db}"), &common)
            })
            .collect::<Result<Vec<_>>>()?;
        check_masters(nodes.iter().map(|n| n.label.as_str()), url)?;
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

/// Refuses a list of masters Redlock cannot use: an even number, fewer
/// than three, or one listed twice (by `host:port`). `url` is for the
/// message.
pub(crate) fn check_masters<'a>(labels: impl Iterator<Item = &'a str>, url: &str) -> Result<()> {
    let mut labels: Vec<&str> = labels.collect();
    if labels.len() < 3 || labels.len().is_multiple_of(2) {
        return Err(Error::invalid_url(
            url,
            format!(
                "Redlock needs an odd number of nodes, 3 or more (5 is usual); got {}",
                labels.len()
            ),
        ));
    }
    labels.sort_unstable();
    if labels.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::invalid_url(
            url,
            "a node is listed twice; Redlock needs independent masters",
        ));
    }
    Ok(())
}

/// The options of a backend made with
/// [`RedlockBackend::from_clients`](crate::RedlockBackend::from_clients): a
/// `redlock://` URL's options, with the same defaults and checks, for
/// `redis::Client`s the application made.
///
/// ```
/// use std::time::Duration;
/// use lock_redlock::config::RedlockOptions;
///
/// let options = RedlockOptions::new().prefix("jobs:").retry_delay(Duration::from_millis(100));
/// ```
#[derive(Clone, Debug)]
pub struct RedlockOptions {
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    allow_eviction: bool,
    retry_delay: Duration,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        Self {
            prefix: CommonOptions::DEFAULT_PREFIX.to_owned(),
            timeout: RedlockConfig::DEFAULT_NODE_TIMEOUT,
            connect_timeout: NodeConfig::DEFAULT_TIMEOUT,
            allow_eviction: false,
            retry_delay: RedlockConfig::DEFAULT_RETRY_DELAY,
        }
    }
}

impl RedlockOptions {
    /// The defaults: prefix `distlock:`, a 100 ms per-node timeout, a 2 s
    /// connect timeout, no eviction, a 200 ms retry delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// Prefix of every key (URL option `prefix`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The per-node limit of one call (URL option `timeout`), also capped
    /// at a tenth of the TTL; more than zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest wait for a connection to one master (URL option
    /// `connect_timeout`); more than zero.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether to use masters whose memory policy may evict lock keys (URL
    /// option `allow_eviction`).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// The cap of the random delay between attempts of a waiting acquire
    /// (URL option `retry_delay`).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The options, checked as a URL's are.
    pub(crate) fn check(self) -> Result<(CommonOptions, Duration)> {
        let common = CommonOptions::new(
            self.prefix,
            self.timeout,
            self.connect_timeout,
            self.allow_eviction,
        )?;
        Ok((common, self.retry_delay))
    }
}

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "redlock";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["redlock"];

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
        assert!(c.nodes.iter().all(|n| !n.tls.is_enabled()));
    }

    #[test]
    fn tls_options_reach_every_master() {
        let c = RedlockConfig::parse(
            "redlock://a:pw1@h1:1,h2:2,h3:3?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key",
        )
        .unwrap();
        let expected = lock_core::tls::TlsOptions::on()
            .ca("/ca.pem")
            .client_cert("/c.pem", "/c.key");
        for node in &c.nodes {
            assert_eq!(node.tls, expected);
            assert!(node.url().starts_with("rediss://"), "{}", node.url());
        }
        let public = RedlockConfig::parse("redlock://h1:1,h2:2,h3:3?tls=true").unwrap();
        assert!(
            public
                .nodes
                .iter()
                .all(|n| n.tls == lock_core::tls::TlsOptions::on())
        );
        assert!(!format!("{c:?}").contains("pw1"));
    }

    #[test]
    fn options_are_checked_as_a_url_is() {
        let (common, retry_delay) = RedlockOptions::new().prefix("j:").check().unwrap();
        assert_eq!(common.prefix, "j:");
        assert_eq!(common.timeout, RedlockConfig::DEFAULT_NODE_TIMEOUT);
        assert_eq!(retry_delay, RedlockConfig::DEFAULT_RETRY_DELAY);
        let err = RedlockOptions::new().prefix("a b").check().unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains("prefix"),
            "{err}"
        );
        let err = RedlockOptions::new()
            .timeout(Duration::ZERO)
            .check()
            .unwrap_err();
        assert!(err.to_string().contains("more than zero"), "{err}");
        let masters = |labels: &[&str]| check_masters(labels.iter().copied(), "clients");
        assert!(masters(&["h:1", "h:2", "h:3"]).is_ok());
        assert!(masters(&["h:1", "h:2"]).is_err());
        assert!(masters(&["h:1", "h:1", "h:3"]).is_err());
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
                ("redlock://h1:1,h2:2,h3:3?tls_cert=/c.pem", "go together"),
            ],
        );
    }
}
