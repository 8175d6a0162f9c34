//! [`RedisConfig`]: where the servers are and how the backend uses them,
//! from a URL or built in code, checked once when the backend connects.

mod names;
pub(crate) mod sentinel;
mod server;
mod url;

use std::str::FromStr;
use std::time::Duration;

use lock_core::tls::TlsOptions;
use lock_core::url::{check_key_prefix, check_positive};
use lock_core::{Error, Result};

pub use names::{NAME, SCHEMES};
pub use server::{Server, Topology};

/// Everything a [`RedisBackend`](crate::RedisBackend) is made from:
/// [`from_url`](Self::from_url) (or `str::parse`) reads a URL; [`Default`]
/// (one server on `127.0.0.1:6379`) and the setters build one in code.
/// Either way it is checked when the backend connects, so a field changed
/// afterwards is checked too. `Debug` never shows a password.
///
/// ```
/// use std::time::Duration;
/// use lock_redis::{RedisConfig, Server, Topology};
///
/// let config = RedisConfig::default()
///     .topology(Topology::Single(Server::new("10.0.0.7:6379").db(2)))
///     .prefix("billing:")
///     .timeout(Duration::from_millis(500))
///     .wait_replicas(1, Duration::from_secs(1));
/// let same: RedisConfig =
///     "redis://10.0.0.7/2?prefix=billing:&timeout=500ms&wait_replicas=1".parse()?;
/// assert_eq!(config.topology, same.topology);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisConfig {
    /// One server, a cluster or a master named by sentinels (the URL's
    /// scheme and hosts).
    pub topology: Topology,
    /// Prefix of every key and of the release channel (`prefix`, default
    /// `distlock:`): at most 64 printable ASCII characters, without spaces
    /// or `#`, and in a cluster without `{` or `}`.
    pub prefix: String,
    /// The longest wait for any command's answer (`timeout`, default 2 s).
    pub timeout: Duration,
    /// The longest wait for a connection (`connect_timeout`, default 2 s).
    pub connect_timeout: Duration,
    /// Whether to use a server whose memory policy may evict lock keys
    /// (`allow_eviction`, default `false`; see the crate docs).
    pub allow_eviction: bool,
    /// TLS to every server, sentinels included (`rediss` schemes, `tls`,
    /// `tls_ca`, `tls_cert`, `tls_key`).
    pub tls: TlsOptions,
    /// How many replicas must have each grant before it is reported
    /// (`wait_replicas`, default 0: none); not in a cluster.
    pub wait_replicas: u32,
    /// How long a grant waits for those replicas (`wait_timeout`, default
    /// 1 s).
    pub wait_timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            topology: Topology::Single(Server::new("127.0.0.1:6379")),
            prefix: "distlock:".to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Self::DEFAULT_TIMEOUT,
            allow_eviction: false,
            tls: TlsOptions::default(),
            wait_replicas: 0,
            wait_timeout: Self::DEFAULT_WAIT_TIMEOUT,
        }
    }
}

impl RedisConfig {
    /// The default command and connect timeouts: far below any sensible TTL.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(1);

    lock_core::setters! {
        /// Where the servers are.
        topology: Topology;
        /// Prefix of every key (URL option `prefix`).
        prefix: into String;
        /// The longest wait for any command's answer (URL option `timeout`);
        /// more than zero.
        timeout: Duration;
        /// The longest wait for a connection (URL option `connect_timeout`);
        /// more than zero.
        connect_timeout: Duration;
        /// Whether to use a server whose memory policy may evict lock keys
        /// (URL option `allow_eviction`).
        allow_eviction: bool;
        /// TLS, and what it trusts and presents (URL options `tls`, `tls_ca`,
        /// `tls_cert`, `tls_key`).
        tls: TlsOptions;
    }

    /// Makes every grant wait until `replicas` replicas have it, for at
    /// most `timeout` (URL options `wait_replicas` and `wait_timeout`); 0
    /// replicas turns it off.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout;
        self
    }

    /// Whether the topology is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster(_))
    }

    /// The one check of every field, whether it came from a URL or from
    /// code; a mistake is an [`Error::InvalidConfig`] naming the option.
    pub(crate) fn check(&self) -> Result<()> {
        self.check_options()?;
        self.topology.check()?;
        let invalid = |reason: &str| Err(Error::invalid_config(crate::NAME, reason));
        if self.is_cluster() {
            if self.prefix.contains(['{', '}']) {
                return invalid(
                    "option \"prefix\" may not contain '{' or '}' in a cluster: the lock name is each key's hash tag",
                );
            }
            if self.wait_replicas > 0 {
                return invalid("option \"wait_replicas\": a cluster has no WAIT for replicas");
            }
        }
        Ok(())
    }

    /// The checks of the fields that do not concern where the servers are:
    /// all a backend on the application's own client uses.
    pub(crate) fn check_options(&self) -> Result<()> {
        check_key_prefix(crate::NAME, &self.prefix)?;
        check_positive(
            crate::NAME,
            &[
                ("timeout", self.timeout),
                ("connect_timeout", self.connect_timeout),
            ],
        )?;
        if self.wait_replicas > 0 {
            check_positive(crate::NAME, &[("wait_timeout", self.wait_timeout)])?;
        }
        Ok(())
    }
}

impl FromStr for RedisConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        Self::from_url(url)
    }
}

#[cfg(test)]
mod tests;
