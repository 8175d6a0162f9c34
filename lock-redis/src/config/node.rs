//! One Redis server and the options every Redis-based backend shares
//! (Redis and Redlock), each checked when it is made.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::secret::{PASSWORD_FILE, read_password_file};
use lock_core::tls::TlsOptions;
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
    /// TLS, and what it trusts and presents.
    pub tls: TlsOptions,
    /// A file holding the password, read each time a client is made
    /// (`password_file`); the URL then has none.
    pub password_file: Option<PathBuf>,
}

impl NodeConfig {
    /// The default command timeout: far below any sensible TTL.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

    /// A node at `url` (`redis[s]://[user:password@]host[:port][/db]`, no
    /// query string), with the timeouts, eviction choice and TLS of
    /// `common`; `rediss://` turns TLS on.
    pub fn new(url: &str, common: &CommonOptions) -> Result<Self> {
        let (rest, tls) = match (url.strip_prefix("redis://"), url.strip_prefix("rediss://")) {
            (Some(rest), _) => (rest, common.tls.clone()),
            (_, Some(rest)) if common.tls.is_enabled() => (rest, common.tls.clone()),
            (_, Some(rest)) => (rest, TlsOptions::on()),
            _ => return Err(Error::invalid_url(url, "expected redis:// or rediss://")),
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let (userinfo, host) = authority.rsplit_once('@').unwrap_or(("", authority));
        let label = host_with_port(url, host, 6379, "redis://HOST[:PORT][/DB]")?;
        if common.password_file.is_some() && userinfo.contains(':') {
            return Err(lock_core::secret::given_twice(url));
        }
        let scheme = if tls.is_enabled() { "rediss" } else { "redis" };
        Ok(Self {
            url: format!("{scheme}://{rest}"),
            label,
            timeout: common.timeout,
            connect_timeout: common.connect_timeout,
            allow_eviction: common.allow_eviction,
            tls,
            password_file: common.password_file.clone(),
        })
    }

    /// The URL the driver connects to, credentials included (so print
    /// `label`, not this); `rediss://` when TLS is on, whose certificates
    /// [`client`](Self::client) adds.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A `redis::Client` of this server, with the TLS settings and the
    /// password file (the files are read now: a missing one is an error
    /// naming its option).
    pub fn client(&self) -> Result<redis::Client> {
        use redis::IntoConnectionInfo as _;
        let mut info = self
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| self.invalid(e))?;
        if let Some(password) = self.password()? {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = match crate::tls::certificates(&self.tls)? {
            None => redis::Client::open(info),
            Some(certificates) => redis::Client::build_with_tls(info, certificates),
        };
        client.map_err(|e| self.invalid(e))
    }

    /// The password in the file `password_file` names, if it names one.
    pub(crate) fn password(&self) -> Result<Option<String>> {
        self.password_file
            .as_deref()
            .map(|path| read_password_file(crate::NAME, path))
            .transpose()
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
            .field("tls", &self.tls)
            .field("password_file", &self.password_file)
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
    /// TLS to every server (off for a backend made from the
    /// application's own clients, whose TLS is theirs).
    pub tls: TlsOptions,
    /// A file holding every server's password (`password_file`), read
    /// when the backend connects, so that no URL or command line shows
    /// it; not beside a password in the URL.
    pub password_file: Option<PathBuf>,
}

impl CommonOptions {
    /// Options given in code rather than in a URL, checked as a URL's are;
    /// a mistake is an [`Error::InvalidConfig`] naming the option.
    pub fn new(
        prefix: impl Into<String>,
        timeout: Duration,
        connect_timeout: Duration,
        allow_eviction: bool,
    ) -> Result<Self> {
        let prefix = prefix.into();
        check_prefix(&prefix, &format!("?prefix={prefix}"))
            .map_err(|e| e.into_config(crate::NAME))?;
        for (option, value) in [("timeout", timeout), ("connect_timeout", connect_timeout)] {
            if value.is_zero() {
                return Err(Error::invalid_config(
                    crate::NAME,
                    format!("option \"{option}\" must be more than zero"),
                ));
            }
        }
        Ok(Self {
            prefix,
            timeout,
            connect_timeout,
            allow_eviction,
            tls: TlsOptions::default(),
            password_file: None,
        })
    }

    /// The option names [`CommonOptions::take`] reads: its own and
    /// [`TlsOptions::URL_OPTIONS`].
    pub const NAMES: &'static [&'static str] = &[
        "prefix",
        "timeout",
        "connect_timeout",
        "allow_eviction",
        "tls",
        "tls_ca",
        "tls_cert",
        "tls_key",
        PASSWORD_FILE,
    ];
    /// The key prefix unless one is given.
    pub const DEFAULT_PREFIX: &'static str = "distlock:";

    /// Takes the common options out of `q`; `default_timeout` is the
    /// command timeout when the URL gives none; `tls_implied` when the
    /// scheme always uses TLS (`rediss`).
    pub fn take(
        q: &mut QueryOptions,
        url: &str,
        default_timeout: Duration,
        tls_implied: bool,
    ) -> Result<Self> {
        let prefix = q
            .take("prefix")
            .unwrap_or_else(|| Self::DEFAULT_PREFIX.to_owned());
        check_prefix(&prefix, url)?;
        let timeout = q.take_positive_duration("timeout", default_timeout)?;
        let connect_timeout =
            q.take_positive_duration("connect_timeout", NodeConfig::DEFAULT_TIMEOUT)?;
        let allow_eviction = q.take_bool("allow_eviction", false)?;
        let tls = TlsOptions::from_query(q, tls_implied)?;
        let password_file = match lock_core::secret::Password::from_query(q, None)? {
            Some(lock_core::secret::Password::File(path)) => Some(path),
            _ => None,
        };
        Ok(Self {
            prefix,
            timeout,
            connect_timeout,
            allow_eviction,
            tls,
            password_file,
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
