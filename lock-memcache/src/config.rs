//! `memcache://` URL → [`MemcacheConfig`].

use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::tls::TlsOptions;
use lock_core::url::host_with_port;
use lock_core::{Error, Result};

/// The parts of a `memcache://host:port[?options]` URL.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MemcacheConfig {
    /// `host:port` (port 11211 when the URL names none).
    pub addr: String,
    /// Prepended to every key (`prefix`, default `distlock:`).
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

    /// Parses a `memcache://host:port[?options]` URL.
    pub fn parse(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("memcache://")
            .ok_or_else(|| Error::invalid_url(url, "expected memcache://HOST:PORT"))?;
        let addr = rest.split(['?', '/']).next().unwrap_or_default();
        let addr = host_with_port(url, addr, 11211, "memcache://HOST:PORT")?;
        let mut q = QueryOptions::parse(url)?;
        let prefix = q.take("prefix").unwrap_or_else(|| "distlock:".into());
        if prefix.len() > 64 || !prefix.chars().all(|c| c.is_ascii_graphic() && c != '#') {
            return Err(Error::invalid_url(
                url,
                "option \"prefix\" must be at most 64 printable ASCII characters, without spaces or '#'",
            ));
        }
        let timeout = q.take_positive_duration("timeout", Self::DEFAULT_TIMEOUT)?;
        let connect_timeout = q.take_positive_duration("connect_timeout", Self::DEFAULT_TIMEOUT)?;
        let pool_size = q
            .take_parsed::<usize>("pool_size", "a whole number from 1 to 64")?
            .unwrap_or(4);
        if !(1..=64).contains(&pool_size) {
            return Err(Error::invalid_url(
                url,
                "option \"pool_size\" must be from 1 to 64",
            ));
        }
        let tls = TlsOptions::from_query(&mut q, false)?;
        q.finish(Self::OPTIONS)?;
        Ok(Self {
            addr,
            prefix,
            timeout,
            connect_timeout,
            pool_size,
            tls,
        })
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
        let plain = MemcacheConfig::parse("memcache://h:1").unwrap();
        assert!(!plain.tls.is_enabled());
        let tls =
            MemcacheConfig::parse("memcache://h:1?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key")
                .unwrap();
        assert_eq!(
            tls.tls,
            TlsOptions::on()
                .ca("/ca.pem")
                .client_cert("/c.pem", "/c.key")
        );
        let e = MemcacheConfig::parse("memcache://h:1?tls_cert=/c.pem").unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
    }
}
