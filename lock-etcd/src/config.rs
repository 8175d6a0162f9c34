//! `etcd://h1:p1,h2:p2,h3:p3[/prefix][?options]` URLs → [`EtcdConfig`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::{HostList, QueryOptions};
use lock_core::secret::{PASSWORD_FILE, Password};
use lock_core::tls::TlsOptions;
use lock_core::url::check_positive;
use lock_core::{Error, Result};

/// Everything an [`EtcdBackend`](crate::EtcdBackend) is made from:
/// [`from_url`](Self::from_url) (or `str::parse`) reads an
/// `etcd://host:port,host:port[/prefix][?options]` URL; [`Default`] and the
/// setters build one in code. Either way it is checked when the backend is
/// made, so a field changed afterwards is checked too. `Debug` never shows
/// the password.
///
/// [`EtcdBackend::from_client`](crate::EtcdBackend::from_client) takes one
/// too, and uses only its [`prefix`](Self::prefix) and
/// [`timeout`](Self::timeout).
///
/// ```
/// use std::time::Duration;
/// use lock_core::secret::Password;
/// use lock_etcd::EtcdConfig;
///
/// let config = EtcdConfig::default()
///     .endpoints(["10.0.0.1:2379", "10.0.0.2:2379"])
///     .prefix("app/locks")
///     .credentials("app", Password::File("/run/secrets/etcd".into()))
///     .timeout(Duration::from_secs(1));
/// let same: EtcdConfig =
///     "etcd://10.0.0.1:2379,10.0.0.2:2379/app/locks?user=app&password_file=/run/secrets/etcd&timeout=1s"
///         .parse()?;
/// assert_eq!(config.credentials, same.credentials);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// Each member, `host:port` (the URL's hosts; default
    /// `http://127.0.0.1:2379`). A URL gives them as `http://host:port`
    /// (`https://` with TLS); connecting uses `https` exactly when
    /// [`tls`](Self::tls) is on, whatever the scheme here says, or `http`
    /// when there is none.
    pub endpoints: Vec<String>,
    /// Put before every lock name (the URL's path; default none): `app/locks`
    /// makes keys `app/locks/<name>/…`. Its outer slashes are dropped and one
    /// `/` is put after it; no spaces or control characters. A URL's is kept
    /// in that form already (`app/locks/`).
    pub prefix: String,
    /// User name and password (URL options `user` and `password`, or
    /// `password_file` for a file read at connect; default none), if the
    /// cluster has authentication on.
    pub credentials: Option<(String, Password)>,
    /// TLS (URL options `tls`, `tls_ca`, `tls_cert`, `tls_key`; default
    /// off): off, the public roots and the system's trust store, or a
    /// private CA, and a client certificate for a cluster started with
    /// `--client-cert-auth`.
    pub tls: TlsOptions,
    /// The longest one request may take (URL option `timeout`, default
    /// 3 s); more than zero.
    pub timeout: Duration,
    /// The longest wait for a connection, TLS handshake included (URL
    /// option `connect_timeout`, default 3 s); more than zero.
    pub connect_timeout: Duration,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        Self {
            endpoints: vec!["http://127.0.0.1:2379".to_owned()],
            prefix: String::new(),
            credentials: None,
            tls: TlsOptions::default(),
            timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// What a backend keeps of its [`EtcdConfig`], checked: the prefix
/// normalised (empty, or ending in `/`) and the timeout of each request.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
}

impl EtcdConfig {
    const OPTIONS: &'static [&'static str] = &[
        "user",
        "password",
        PASSWORD_FILE,
        "timeout",
        "connect_timeout",
        TlsOptions::URL_OPTIONS[0],
        TlsOptions::URL_OPTIONS[1],
        TlsOptions::URL_OPTIONS[2],
        TlsOptions::URL_OPTIONS[3],
    ];
    const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

    /// Reads `etcd://host:port,host:port[/prefix][?user=…&password=…&tls_ca=…&timeout=…]`,
    /// with the same checks as
    /// [`EtcdBackend::connect_with`](crate::EtcdBackend::connect_with)
    /// makes; a mistake is an [`Error::InvalidUrl`].
    pub fn from_url(url: &str) -> Result<Self> {
        let HostList { hosts, path, .. } = HostList::parse(url, crate::SCHEMES[0])?;
        let mut q = QueryOptions::parse(url)?;
        let user = q.take("user");
        let given = q.take("password");
        let password = Password::from_query(&mut q, given)?;
        let tls = TlsOptions::from_query(&mut q, false)?;
        let defaults = Self::default();
        let timeout = q.take_duration("timeout")?.unwrap_or(defaults.timeout);
        let connect_timeout = q
            .take_duration("connect_timeout")?
            .unwrap_or(defaults.connect_timeout);
        q.finish(Self::OPTIONS)?;
        let credentials = match (user, password) {
            (Some(u), Some(p)) => Some((u, p)),
            (None, None) => None,
            _ => {
                return Err(Error::invalid_url(
                    url,
                    "options \"user\" and \"password\" (or \"password_file\") go together",
                ));
            }
        };
        let scheme = scheme(&tls);
        let endpoints = hosts
            .iter()
            .map(|h| match h {
                h if h.contains('@') => Err(Error::invalid_url(
                    url,
                    "give credentials as ?user=…&password=…",
                )),
                h => Ok(format!("{scheme}://{h}")),
            })
            .collect::<Result<Vec<_>>>()?;
        let config = Self {
            endpoints,
            prefix: normalise_prefix(path),
            credentials,
            tls,
            timeout,
            connect_timeout,
        };
        config.check().map_err(|e| e.into_url(url))?;
        Ok(config)
    }

    /// The members, `host:port` or `http(s)://host:port` (the URL's hosts).
    pub fn endpoints<I, S>(mut self, endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    lock_core::setters! {
        /// Put before every lock name, as a URL's path is (`app/locks` makes
        /// keys `app/locks/<name>/…`); no spaces or control characters.
        prefix: into String;
    }

    /// The user and password of a cluster with authentication on (URL
    /// options `user` and `password` or `password_file`).
    pub fn credentials(mut self, user: impl Into<String>, password: Password) -> Self {
        self.credentials = Some((user.into(), password));
        self
    }

    lock_core::setters! {
        /// TLS, and what it trusts and presents (URL options `tls`, `tls_ca`,
        /// `tls_cert`, `tls_key`).
        tls: TlsOptions;
        /// The longest one request may take (URL option `timeout`), whatever
        /// the client's own settings; more than zero.
        timeout: Duration;
        /// The longest wait for a connection (URL option `connect_timeout`);
        /// more than zero.
        connect_timeout: Duration;
    }

    /// The one check of every field, whether it came from a URL or from
    /// code; a mistake is an [`Error::InvalidConfig`] naming the option.
    /// Gives what the backend keeps, the prefix normalised.
    pub(crate) fn check(&self) -> Result<Settings> {
        if self.endpoints.is_empty() {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"endpoints\" must name at least one member",
            ));
        }
        if let Some(bad) = self.endpoints.iter().find(|e| {
            host_of(e).is_empty() || e.chars().any(|c| c.is_whitespace() || c.is_control())
        }) {
            return Err(Error::invalid_config(
                crate::NAME,
                format!("option \"endpoints\": bad member address \"{bad}\""),
            ));
        }
        let prefix = normalise_prefix(&self.prefix);
        if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"prefix\" (a URL's path) must not contain spaces or control characters",
            ));
        }
        if let Some((user, _)) = &self.credentials
            && user.is_empty()
        {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"user\" must not be empty",
            ));
        }
        check_positive(
            crate::NAME,
            &[
                ("timeout", self.timeout),
                ("connect_timeout", self.connect_timeout),
            ],
        )?;
        Ok(Settings {
            prefix,
            timeout: self.timeout,
        })
    }

    /// The members' addresses as connecting uses them: `https` with TLS,
    /// `http` without, whatever [`endpoints`](Self::endpoints) say.
    pub(crate) fn endpoint_urls(&self) -> Vec<String> {
        let scheme = scheme(&self.tls);
        self.endpoints
            .iter()
            .map(|e| format!("{scheme}://{}", host_of(e)))
            .collect()
    }
}

impl FromStr for EtcdConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        Self::from_url(url)
    }
}

/// The URL scheme of the members' addresses.
fn scheme(tls: &TlsOptions) -> &'static str {
    if tls.is_enabled() { "https" } else { "http" }
}

/// A member's `host:port`, without the scheme it may be written with.
fn host_of(endpoint: &str) -> &str {
    endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))
        .unwrap_or(endpoint)
}

/// The key prefix from a URL's path or [`EtcdConfig::prefix`]: without its
/// outer slashes, then empty or ending in `/`.
fn normalise_prefix(path: &str) -> String {
    let prefix = path.trim_matches('/');
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
