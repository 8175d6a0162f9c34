//! `etcd://h1:p1,h2:p2,h3:p3[/prefix][?options]` URLs.

use std::fmt;
use std::time::Duration;

use lock_core::backend::{HostList, QueryOptions};
use lock_core::secret::{PASSWORD_FILE, Password};
use lock_core::tls::TlsOptions;
use lock_core::{Error, Result};

/// A parsed `etcd://` URL. `Debug` never shows the password.
#[derive(Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// `http://host:port` (or `https://`) for each member; connecting
    /// uses `https` exactly when [`tls`](Self::tls) is on, whatever the
    /// scheme here says.
    pub endpoints: Vec<String>,
    /// Put before every lock name; empty, or ending in `/`.
    pub prefix: String,
    /// User name and password (given, or a file read at connect:
    /// `password_file`), if the cluster has authentication on.
    pub credentials: Option<(String, Password)>,
    /// TLS (URL options `tls`, `tls_ca`, `tls_cert`, `tls_key`): off, the
    /// public roots and the system's trust store, or a private CA, and a
    /// client certificate for a cluster started with `--client-cert-auth`.
    pub tls: TlsOptions,
    /// The longest one request may take.
    pub timeout: Duration,
    /// The longest wait for a connection.
    pub connect_timeout: Duration,
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

    /// Parses `etcd://host:port,host:port[/prefix][?user=…&password=…&tls_ca=…&timeout=…]`.
    pub fn parse(url: &str) -> Result<Self> {
        let HostList { hosts, path, .. } = HostList::parse(url, crate::SCHEMES[0])?;
        let mut q = QueryOptions::parse(url)?;
        let user = q.take("user");
        let given = q.take("password");
        let password = Password::from_query(&mut q, given)?;
        let tls = TlsOptions::from_query(&mut q, false)?;
        let timeout = q.take_positive_duration("timeout", Self::DEFAULT_TIMEOUT)?;
        let connect_timeout = q.take_positive_duration("connect_timeout", Self::DEFAULT_TIMEOUT)?;
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
        Ok(Self {
            endpoints,
            prefix: key_prefix(path, url)?,
            credentials,
            tls,
            timeout,
            connect_timeout,
        })
    }
}

/// The URL scheme of the members' addresses.
fn scheme(tls: &TlsOptions) -> &'static str {
    if tls.is_enabled() { "https" } else { "http" }
}

impl EtcdConfig {
    /// The members' addresses as connecting uses them: `https` with TLS,
    /// `http` without, whatever [`endpoints`](Self::endpoints) say.
    pub(crate) fn endpoint_urls(&self) -> Vec<String> {
        let scheme = scheme(&self.tls);
        self.endpoints
            .iter()
            .map(|e| {
                let host = e
                    .strip_prefix("https://")
                    .or_else(|| e.strip_prefix("http://"))
                    .unwrap_or(e);
                format!("{scheme}://{host}")
            })
            .collect()
    }
}

/// The key prefix from a URL's path or [`EtcdOptions::prefix`]: without
/// its outer slashes, then empty or ending in `/`. `url` is for the message.
fn key_prefix(path: &str, url: &str) -> Result<String> {
    let prefix = path.trim_matches('/');
    if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid_url(
            url,
            "the key prefix must not contain spaces or control characters",
        ));
    }
    Ok(if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    })
}

/// The options of a backend made with
/// [`EtcdBackend::from_client`](crate::EtcdBackend::from_client): those of
/// an `etcd://` URL that do not concern connecting, with the same defaults
/// and checks.
///
/// ```
/// use std::time::Duration;
/// use lock_etcd::config::EtcdOptions;
///
/// let options = EtcdOptions::new().prefix("app/locks").timeout(Duration::from_secs(1));
/// ```
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            prefix: String::new(),
            timeout: EtcdConfig::DEFAULT_TIMEOUT,
        }
    }
}

impl EtcdOptions {
    /// The defaults: no key prefix, a 3 s timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// Put before every lock name, as a URL's path is (`app/locks` makes
    /// keys `app/locks/<name>/…`); no spaces or control characters.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The longest one request may take (URL option `timeout`), whatever
    /// the client's own settings; more than zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The options of a URL's `config`, checked already.
    pub(crate) fn of(config: &EtcdConfig) -> Self {
        Self {
            prefix: config.prefix.clone(),
            timeout: config.timeout,
        }
    }

    /// The options, checked as a URL's are (the prefix normalised as a
    /// URL's path is); a mistake is an [`Error::InvalidConfig`] naming the
    /// option.
    pub(crate) fn check(self) -> Result<Self> {
        let prefix = key_prefix(&self.prefix, &format!("etcd://…/{}", self.prefix))
            .map_err(|e| e.into_config(crate::NAME))?;
        if self.timeout.is_zero() {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"timeout\" must be more than zero",
            ));
        }
        Ok(Self {
            prefix,
            timeout: self.timeout,
        })
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
            .finish_non_exhaustive()
    }
}

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "etcd";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["etcd"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_prefix_and_credentials() {
        let c = EtcdConfig::parse(
            "etcd://127.0.0.1:2379,127.0.0.2:2379/app/locks?user=u&password=hunter2",
        )
        .unwrap();
        assert_eq!(
            c.endpoints,
            ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]
        );
        assert_eq!(c.prefix, "app/locks/");
        assert!(!format!("{c:?}").contains("hunter2"));
        assert_eq!(EtcdConfig::parse("etcd://h:1").unwrap().prefix, "");
        let from_file = EtcdConfig::parse("etcd://h:1?user=u&password_file=/run/etcd").unwrap();
        assert_eq!(
            from_file.credentials,
            Some(("u".to_owned(), Password::File("/run/etcd".into())))
        );
        for url in [
            "etcd://h:1?password_file=/run/etcd",
            "etcd://h:1?user=u&password=p&password_file=/run/etcd",
        ] {
            assert!(
                EtcdConfig::parse(url).unwrap_err().is_invalid_input(),
                "{url}"
            );
        }
    }

    #[test]
    fn tls_options_turn_on_https() {
        let c = EtcdConfig::parse("etcd://h:1,h:2?tls=true").unwrap();
        assert_eq!(c.endpoints, ["https://h:1", "https://h:2"]);
        assert_eq!(c.tls, TlsOptions::on());
        let c =
            EtcdConfig::parse("etcd://h:1?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key").unwrap();
        assert_eq!(
            c.tls,
            TlsOptions::on()
                .ca("/ca.pem")
                .client_cert("/c.pem", "/c.key")
        );
        assert_eq!(c.endpoint_urls(), ["https://h:1"]);
        let mut plain = EtcdConfig::parse("etcd://h:1").unwrap();
        assert_eq!(plain.endpoint_urls(), ["http://h:1"]);
        plain.tls = TlsOptions::on();
        assert_eq!(plain.endpoint_urls(), ["https://h:1"], "set in code");
    }

    #[test]
    fn options_are_checked_as_a_url_is() {
        let checked = |prefix: &str| EtcdOptions::new().prefix(prefix).check().map(|o| o.prefix);
        assert_eq!(checked("/app/locks/").unwrap(), "app/locks/");
        assert_eq!(checked("").unwrap(), "");
        let err = checked("a b").unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains("spaces"),
            "{err}"
        );
        let err = EtcdOptions::new()
            .timeout(Duration::ZERO)
            .check()
            .unwrap_err();
        assert!(err.to_string().contains("more than zero"), "{err}");
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        lock_core::url::assert_refused(
            EtcdConfig::parse,
            &[
                ("etcd://h:1?user=u", "go together"),
                ("etcd://u:p@h:1", "?user="),
                ("etcd://h:1,,h:2", "empty host"),
                ("etcd://h:1?tls=yes", "true or false"),
                ("etcd://h:1?tls_cert=/c.pem", "go together"),
                ("etcd://h:1?tls=false&tls_ca=/ca.pem", "need TLS"),
                ("etcd://h:1?bogus=1", "accepted options"),
            ],
        );
    }
}
