//! `memcache://` URL → [`MemcacheConfig`].

use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::tls::TlsOptions;
use lock_core::url::{check_addr, check_key_prefix, check_positive, host_with_port};
use lock_core::{Error, Result};

/// Everything a [`MemcacheBackend`](crate::MemcacheBackend) is made from:
/// [`from_url`](Self::from_url) (or `str::parse`) reads a
/// `memcache://host:port[?options]` URL; [`Default`] and the setters build
/// one in code. Either way it is checked when the backend connects, so a
/// field changed afterwards is checked too.
///
/// ```
/// use std::time::Duration;
/// use lock_memcache::MemcacheConfig;
///
/// let config = MemcacheConfig::default()
///     .addr("10.0.0.7:11211")
///     .prefix("billing:")
///     .timeout(Duration::from_millis(500));
/// let same: MemcacheConfig = "memcache://10.0.0.7?prefix=billing:&timeout=500ms".parse()?;
/// assert_eq!(config.addr, same.addr);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MemcacheConfig {
    /// `host:port` (default `127.0.0.1:11211`; port 11211 when a URL
    /// names none).
    pub addr: String,
    /// Prepended to every key (`prefix`, default `distlock:`): at most 64
    /// printable ASCII characters, without spaces or `#`.
    pub prefix: String,
    /// The longest one request may take, waiting for a free connection
    /// included (`timeout`, default 2 s).
    pub timeout: Duration,
    /// The longest wait for a new connection (`connect_timeout`, default 2 s).
    pub connect_timeout: Duration,
    /// Connections at most (`pool_size`, 1 to 64, default 4).
    pub pool_size: usize,
    /// TLS to a server started with `-Z` (`tls`, `tls_ca`, `tls_cert`,
    /// `tls_key`). memcached has no users: with `ssl_verify_mode=2` and a
    /// CA of its own, the client certificate is its only gate.
    pub tls: TlsOptions,
}

impl Default for MemcacheConfig {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:11211".to_owned(),
            prefix: "distlock:".to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Self::DEFAULT_TIMEOUT,
            pool_size: 4,
            tls: TlsOptions::default(),
        }
    }
}

impl MemcacheConfig {
    const OPTIONS: &'static [&'static str] = &[
        "prefix",
        "timeout",
        "connect_timeout",
        "pool_size",
        "tls",
        "tls_ca",
        "tls_cert",
        "tls_key",
    ];
    const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

    /// Reads a `memcache://host:port[?options]` URL, with the same checks
    /// as [`MemcacheBackend::connect_with`](crate::MemcacheBackend::connect_with)
    /// makes; a mistake is an [`Error::InvalidUrl`].
    pub fn from_url(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("memcache://")
            .ok_or_else(|| Error::invalid_url(url, "expected memcache://HOST:PORT"))?;
        let addr = rest.split(['?', '/']).next().unwrap_or_default();
        let addr = host_with_port(url, addr, 11211, "memcache://HOST:PORT")?;
        let mut q = QueryOptions::parse(url)?;
        let defaults = Self::default();
        let config = Self {
            addr,
            prefix: q.take("prefix").unwrap_or(defaults.prefix),
            timeout: q.take_duration("timeout")?.unwrap_or(defaults.timeout),
            connect_timeout: q
                .take_duration("connect_timeout")?
                .unwrap_or(defaults.connect_timeout),
            pool_size: q
                .take_parsed::<usize>("pool_size", "a whole number from 1 to 64")?
                .unwrap_or(defaults.pool_size),
            tls: TlsOptions::from_query(&mut q, false)?,
        };
        q.finish(Self::OPTIONS)?;
        config.check().map_err(|e| e.into_url(url))?;
        Ok(config)
    }

    lock_core::setters! {
        /// The server, `host:port`.
        addr: into String;
        /// Prepended to every key (URL option `prefix`).
        prefix: into String;
        /// The longest one request may take (URL option `timeout`); more than
        /// zero.
        timeout: Duration;
        /// The longest wait for a new connection (URL option
        /// `connect_timeout`); more than zero.
        connect_timeout: Duration;
        /// Connections at most (URL option `pool_size`), 1 to 64.
        pool_size: usize;
        /// TLS, and what it trusts and presents (URL options `tls`, `tls_ca`,
        /// `tls_cert`, `tls_key`).
        tls: TlsOptions;
    }

    /// The one check of every field, whether it came from a URL or from
    /// code; a mistake is an [`Error::InvalidConfig`] naming the option.
    pub(crate) fn check(&self) -> Result<()> {
        check_key_prefix(crate::NAME, &self.prefix)?;
        check_positive(
            crate::NAME,
            &[
                ("timeout", self.timeout),
                ("connect_timeout", self.connect_timeout),
            ],
        )?;
        if !(1..=64).contains(&self.pool_size) {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"pool_size\" must be from 1 to 64",
            ));
        }
        check_addr(crate::NAME, &self.addr)
    }
}

impl FromStr for MemcacheConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        Self::from_url(url)
    }
}

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "memcache";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["memcache"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_come_from_the_url() {
        let plain = MemcacheConfig::from_url("memcache://h:1").unwrap();
        assert!(!plain.tls.is_enabled());
        let tls = MemcacheConfig::from_url(
            "memcache://h:1?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key",
        )
        .unwrap();
        assert_eq!(
            tls.tls,
            TlsOptions::on()
                .ca("/ca.pem")
                .client_cert("/c.pem", "/c.key")
        );
        let e = MemcacheConfig::from_url("memcache://h:1?tls_cert=/c.pem").unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
    }

    #[test]
    fn code_and_urls_meet_one_check() {
        let url: MemcacheConfig = "memcache://h?prefix=p:&pool_size=8".parse().unwrap();
        let code = MemcacheConfig::default()
            .addr("h:11211")
            .prefix("p:")
            .pool_size(8);
        assert_eq!(format!("{url:?}"), format!("{code:?}"));
        assert!(MemcacheConfig::default().check().is_ok());
        for (config, option) in [
            (MemcacheConfig::default().pool_size(0), "pool_size"),
            (MemcacheConfig::default().prefix("a b"), "prefix"),
            (
                MemcacheConfig::default().timeout(Duration::ZERO),
                "\"timeout\"",
            ),
            (MemcacheConfig::default().addr(""), "address"),
        ] {
            let e = config.check().unwrap_err();
            assert!(
                matches!(&e, Error::InvalidConfig { reason, .. } if reason.contains(option)),
                "{e:?}"
            );
        }
        for (url, option) in [
            ("memcache://h?pool_size=65", "pool_size"),
            ("memcache://h?timeout=0s", "\"timeout\""),
            ("memcache://h?prefix=a%20b", "prefix"),
        ] {
            let e = MemcacheConfig::from_url(url).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidUrl { reason, .. } if reason.contains(option)),
                "{url}: {e:?}"
            );
        }
    }
}
