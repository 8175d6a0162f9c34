//! [`RedlockConfig`]: the masters and how the backend uses them, from a
//! `redlock://h1:p1,h2:p2,h3:p3[/db][?options]` URL or built in code.

use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::{HostList, QueryOptions};
use lock_core::secret::{PASSWORD_FILE, Password};
use lock_core::tls::TlsOptions;
use lock_core::url::{check_addr, check_key_prefix, check_positive, host_with_port, userinfo};
use lock_core::{Error, Result};
use lock_redis::Server;

/// Everything a [`RedlockBackend`](crate::RedlockBackend) is made from:
/// [`from_url`](Self::from_url) (or `str::parse`) reads a `redlock://`
/// URL; [`Default`] (no masters yet) and the setters build one in code.
/// Either way it is checked when the backend connects, so a field changed
/// afterwards is checked too. `Debug` never shows a password.
///
/// ```
/// use std::time::Duration;
/// use lock_redis::Server;
/// use lock_redlock::RedlockConfig;
///
/// let config = RedlockConfig::default()
///     .masters(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"].map(Server::new))
///     .prefix("jobs:")
///     .retry_delay(Duration::from_millis(100));
/// let same: RedlockConfig =
///     "redlock://10.0.0.1,10.0.0.2,10.0.0.3?prefix=jobs:&retry_delay=100ms".parse()?;
/// assert_eq!(config.masters, same.masters);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedlockConfig {
    /// The independent masters: an odd number, 3 or more (5 is usual),
    /// each a different `host:port`, each with its own database and
    /// credentials (a URL's hosts, its path and `password_file`).
    pub masters: Vec<Server>,
    /// Prefix of every key (`prefix`, default `distlock:`): at most 64
    /// printable ASCII characters, without spaces or `#`.
    pub prefix: String,
    /// The per-master limit of one call (`timeout`, default 100 ms), also
    /// capped at a tenth of the TTL: far below any sensible TTL, so a dead
    /// master costs little of a lease's validity.
    pub timeout: Duration,
    /// The longest wait for a connection to one master
    /// (`connect_timeout`, default 2 s).
    pub connect_timeout: Duration,
    /// Whether to use masters whose memory policy may evict lock keys
    /// (`allow_eviction`, default `false`).
    pub allow_eviction: bool,
    /// TLS to every master, with the same CA and client certificate
    /// (`tls`, `tls_ca`, `tls_cert`, `tls_key`).
    pub tls: TlsOptions,
    /// The cap of the random delay between two attempts of a waiting
    /// acquire (`retry_delay`, default 200 ms).
    pub retry_delay: Duration,
}

impl Default for RedlockConfig {
    fn default() -> Self {
        Self {
            masters: Vec::new(),
            prefix: "distlock:".to_owned(),
            timeout: Self::DEFAULT_NODE_TIMEOUT,
            connect_timeout: Duration::from_secs(2),
            allow_eviction: false,
            tls: TlsOptions::default(),
            retry_delay: Self::DEFAULT_RETRY_DELAY,
        }
    }
}

impl RedlockConfig {
    /// The per-master call limit unless `timeout` says otherwise.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
    const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
    const OPTIONS: &'static [&'static str] = &[
        "prefix",
        "timeout",
        "connect_timeout",
        "allow_eviction",
        "retry_delay",
        PASSWORD_FILE,
        TlsOptions::URL_OPTIONS[0],
        TlsOptions::URL_OPTIONS[1],
        TlsOptions::URL_OPTIONS[2],
        TlsOptions::URL_OPTIONS[3],
    ];

    /// Reads `redlock://[user:password@]host:port,[user:password@]host:port,…[/db][?options]`.
    ///
    /// Each host may carry its own credentials; `password_file` gives
    /// every master without a password in the URL the one in that file;
    /// `tls=true` (or `tls_ca`, `tls_cert` and `tls_key`) connects to every
    /// master with TLS. Checked as
    /// [`RedlockBackend::connect_with`](crate::RedlockBackend::connect_with)
    /// checks; a mistake is an [`Error::InvalidUrl`].
    pub fn from_url(url: &str) -> Result<Self> {
        let HostList { hosts, path, .. } = HostList::parse(url, crate::SCHEMES[0])?;
        let db = match path {
            "" => 0,
            db => db.parse().map_err(|_| {
                Error::invalid_url(url, format!("database \"{db}\" is not a number"))
            })?,
        };
        let mut q = QueryOptions::parse(url)?;
        let defaults = Self::default();
        let password_file = Password::from_query(&mut q, None)?;
        let config = Self {
            prefix: q.take("prefix").unwrap_or(defaults.prefix),
            timeout: q.take_duration("timeout")?.unwrap_or(defaults.timeout),
            connect_timeout: q
                .take_duration("connect_timeout")?
                .unwrap_or(defaults.connect_timeout),
            allow_eviction: q.take_bool("allow_eviction", false)?,
            retry_delay: q
                .take_duration("retry_delay")?
                .unwrap_or(defaults.retry_delay),
            tls: TlsOptions::from_query(&mut q, false)?,
            masters: hosts
                .iter()
                .map(|host| master(url, host, db, password_file.as_ref()))
                .collect::<Result<_>>()?,
        };
        q.finish(Self::OPTIONS)?;
        config.check().map_err(|e| e.into_url(url))?;
        Ok(config)
    }

    /// The masters.
    pub fn masters(mut self, masters: impl IntoIterator<Item = Server>) -> Self {
        self.masters = masters.into_iter().collect();
        self
    }

    lock_core::setters! {
        /// Prefix of every key (URL option `prefix`).
        prefix: into String;
        /// The per-master limit of one call (URL option `timeout`); more than
        /// zero.
        timeout: Duration;
        /// The longest wait for a connection to one master (URL option
        /// `connect_timeout`); more than zero.
        connect_timeout: Duration;
        /// Whether to use masters whose memory policy may evict lock keys
        /// (URL option `allow_eviction`).
        allow_eviction: bool;
        /// TLS, and what it trusts and presents (URL options `tls`, `tls_ca`,
        /// `tls_cert`, `tls_key`).
        tls: TlsOptions;
        /// The cap of the random delay between attempts of a waiting acquire
        /// (URL option `retry_delay`).
        retry_delay: Duration;
    }

    /// How many masters make a majority.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// The one check of every field, whether it came from a URL or from
    /// code; a mistake is an [`Error::InvalidConfig`] naming the option.
    pub(crate) fn check(&self) -> Result<()> {
        self.check_options()?;
        for master in &self.masters {
            check_addr(crate::NAME, &master.addr)?;
        }
        check_masters(self.masters.iter().map(|m| m.addr.as_str()))
    }

    /// The checks of the fields that do not concern the masters: all a
    /// backend on the application's own clients uses.
    pub(crate) fn check_options(&self) -> Result<()> {
        check_key_prefix(crate::NAME, &self.prefix)?;
        check_positive(
            crate::NAME,
            &[
                ("timeout", self.timeout),
                ("connect_timeout", self.connect_timeout),
            ],
        )
    }
}

impl FromStr for RedlockConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        Self::from_url(url)
    }
}

/// One master of a URL: `[user[:password]@]host[:port]`, on database `db`,
/// with the password in `password_file` unless it gives its own.
fn master(url: &str, host: &str, db: u32, password_file: Option<&Password>) -> Result<Server> {
    let (info, host) = host.rsplit_once('@').unwrap_or(("", host));
    let addr = host_with_port(url, host, 6379, "redlock://HOST:PORT,…")?;
    let (username, given) = userinfo(url, info)?;
    let password = match (given, password_file) {
        (Some(_), Some(_)) => return Err(lock_core::secret::given_twice(url)),
        (Some(p), _) => Some(Password::Given(p)),
        (None, file) => file.cloned(),
    };
    let mut server = Server::new(addr).db(db);
    server.username = username;
    server.password = password;
    Ok(server)
}

/// Refuses a list of masters Redlock cannot use: an even number, fewer
/// than three, or one listed twice (by `host:port`).
pub(crate) fn check_masters<'a>(labels: impl Iterator<Item = &'a str>) -> Result<()> {
    let mut labels: Vec<&str> = labels.collect();
    if labels.len() < 3 || labels.len().is_multiple_of(2) {
        return Err(Error::invalid_config(
            crate::NAME,
            format!(
                "Redlock needs an odd number of nodes, 3 or more (5 is usual); got {}",
                labels.len()
            ),
        ));
    }
    labels.sort_unstable();
    if labels.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::invalid_config(
            crate::NAME,
            "a node is listed twice; Redlock needs independent masters",
        ));
    }
    Ok(())
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
        let c = RedlockConfig::from_url(
            "redlock://a:pw1@h1:1,h2:2,b:pw2@h3:3/4?retry_delay=50ms&prefix=x:",
        )
        .unwrap();
        let addrs: Vec<_> = c.masters.iter().map(|m| m.addr.as_str()).collect();
        assert_eq!(addrs, ["h1:1", "h2:2", "h3:3"]);
        assert_eq!(
            c.masters[0],
            Server::new("h1:1")
                .db(4)
                .username("a")
                .password(Password::Given("pw1".into()))
        );
        assert_eq!(c.masters[1], Server::new("h2:2").db(4));
        assert_eq!(c.quorum(), 2);
        assert_eq!(c.timeout, RedlockConfig::DEFAULT_NODE_TIMEOUT);
        assert_eq!(c.retry_delay, Duration::from_millis(50));
        assert!(!format!("{c:?}").contains("pw1"));
        assert!(!c.tls.is_enabled());
        let file = RedlockConfig::from_url("redlock://a@h1,h2,h3?password_file=/run/pw").unwrap();
        let from_file = Some(Password::File("/run/pw".into()));
        assert!(file.masters.iter().all(|m| m.password == from_file));
        let err =
            RedlockConfig::from_url("redlock://a:pw1@h1,h2,h3?password_file=/run/pw").unwrap_err();
        assert!(
            err.is_invalid_input() && !err.to_string().contains("pw1"),
            "{err}"
        );
    }

    #[test]
    fn tls_options_reach_every_master() {
        let c = RedlockConfig::from_url(
            "redlock://a:pw1@h1:1,h2:2,h3:3?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key",
        )
        .unwrap();
        let expected = TlsOptions::on()
            .ca("/ca.pem")
            .client_cert("/c.pem", "/c.key");
        assert_eq!(c.tls, expected);
        let public = RedlockConfig::from_url("redlock://h1:1,h2:2,h3:3?tls=true").unwrap();
        assert_eq!(public.tls, TlsOptions::on());
        assert!(!format!("{c:?}").contains("pw1"));
    }

    #[test]
    fn code_and_urls_meet_one_check() {
        let url: RedlockConfig = "redlock://h1,h2,h3?prefix=j:".parse().unwrap();
        let code = RedlockConfig::default()
            .masters(["h1:6379", "h2:6379", "h3:6379"].map(Server::new))
            .prefix("j:");
        assert_eq!(format!("{url:?}"), format!("{code:?}"));
        let three = || RedlockConfig::default().masters(["h:1", "h:2", "h:3"].map(Server::new));
        for (config, option) in [
            (three().prefix("a b"), "prefix"),
            (three().timeout(Duration::ZERO), "\"timeout\""),
            (three().connect_timeout(Duration::ZERO), "connect_timeout"),
            (RedlockConfig::default(), "odd number"),
            (
                three().masters(["h:1", "h:1", "h:3"].map(Server::new)),
                "twice",
            ),
        ] {
            let e = config.check().unwrap_err();
            assert!(
                matches!(&e, Error::InvalidConfig { reason, .. } if reason.contains(option)),
                "{option}: {e:?}"
            );
        }
        assert!(
            RedlockConfig::default().check_options().is_ok(),
            "for clients of one's own"
        );
        let masters = |labels: &[&str]| check_masters(labels.iter().copied());
        assert!(masters(&["h:1", "h:2", "h:3"]).is_ok());
        assert!(masters(&["h:1", "h:2"]).is_err());
        assert!(masters(&["h:1", "h:1", "h:3"]).is_err());
    }

    #[test]
    fn rejects_even_short_or_repeated_node_lists() {
        lock_core::url::assert_refused(
            RedlockConfig::from_url,
            &[
                ("redlock://h1:1,h2:2", "odd number"),
                ("redlock://h1:1,h2:2,h3:3,h4:4", "odd number"),
                ("redlock://h1:1,h1:1,h3:3", "listed twice"),
                ("redlock://h1:1,,h3:3", "empty host"),
                ("redlock://h1:1,h2:2,h3:3/x", "not a number"),
                ("redlock://h1:x,h2,h3", "port"),
                ("redlock://h1:1,h2:2,h3:3?tls=maybe", "true or false"),
                ("redlock://h1:1,h2:2,h3:3?tls_cert=/c.pem", "go together"),
            ],
        );
        let e = RedlockConfig::from_url("redlock://h1:1,h2:2").unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
    }
}
