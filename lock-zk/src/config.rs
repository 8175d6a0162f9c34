//! `zk://h1:p1,h2:p2[/chroot][?options]` URLs.

use std::fmt;
use std::time::Duration;

use lock_core::backend::{HostList, QueryOptions};
use lock_core::secret::{PASSWORD_FILE, Password};
use lock_core::tls::TlsOptions;
use lock_core::{Error, Result};

/// A parsed `zk://` URL. `Debug` never shows the password.
#[derive(Clone)]
#[non_exhaustive]
pub struct ZkConfig {
    /// `host:port` of each server.
    pub hosts: Vec<String>,
    /// The ZooKeeper chroot every path lives under: empty, or `/a/b`.
    /// Created (persistent) if missing.
    pub chroot: String,
    /// The session timeout to ask for; the server clamps it to its
    /// `minSessionTimeout`..`maxSessionTimeout`.
    pub session_timeout: Duration,
    /// `digest` user name and password (given, or a file read at each new
    /// session: `password_file`): the session authenticates with them and
    /// every node distlock creates gets the creator-only ACL.
    pub digest: Option<(String, Password)>,
    /// Create lock parents as container nodes, which the server deletes once
    /// they are empty (ZooKeeper 3.5 and later). When this is off, or the
    /// server does not know container nodes, parents are ordinary persistent
    /// nodes that distlock deletes itself after a release leaves them empty.
    pub container_parents: bool,
    /// Bounds each request (option `timeout`, default 3 s).
    pub timeout: Duration,
    /// Bounds the making of a session (option `connect_timeout`, default
    /// 5 s).
    pub connect_timeout: Duration,
    /// TLS to servers with a `secureClientPort` (`tls`, `tls_ca`,
    /// `tls_cert`, `tls_key`). `tls=true` trusts the system's store.
    pub tls: TlsOptions,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkConfig")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("session_timeout", &self.session_timeout)
            .field("user", &self.digest.as_ref().map(|(u, _)| u))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("container_parents", &self.container_parents)
            .field("tls", &self.tls)
            .finish()
    }
}

impl ZkConfig {
    /// The default session timeout.
    pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
    const OPTIONS: &'static [&'static str] = &[
        "session_timeout",
        "auth",
        PASSWORD_FILE,
        "timeout",
        "connect_timeout",
        "tls",
        "tls_ca",
        "tls_cert",
        "tls_key",
    ];
    const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
    const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    const DEFAULT_PORT: u16 = 2181;

    /// Parses `zk://host:port,host:port[/chroot][?session_timeout=…&auth=digest:user:password&timeout=…&connect_timeout=…]`;
    /// `auth=digest:user&password_file=PATH` reads the password from a file.
    pub fn parse(url: &str) -> Result<Self> {
        let HostList { hosts, path, .. } = HostList::parse(url, crate::SCHEMES[0])?;
        let path = if path.is_empty() {
            String::new()
        } else {
            format!("/{path}")
        };
        let mut q = QueryOptions::parse(url)?;
        let auth = q.take("auth");
        let from_file = q.contains(PASSWORD_FILE);
        let session_timeout =
            q.take_positive_duration("session_timeout", Self::DEFAULT_SESSION_TIMEOUT)?;
        let timeout = q.take_positive_duration("timeout", Self::DEFAULT_TIMEOUT)?;
        let connect_timeout =
            q.take_positive_duration("connect_timeout", Self::DEFAULT_CONNECT_TIMEOUT)?;
        let digest = match auth.map(|a| parse_auth(url, &a, from_file)).transpose()? {
            Some((user, given)) => {
                Password::from_query(&mut q, given)?.map(|password| (user, password))
            }
            None if from_file => {
                return Err(Error::invalid_url(
                    url,
                    "option \"password_file\" needs \"auth=digest:USER\"",
                ));
            }
            None => None,
        };
        let tls = TlsOptions::from_query(&mut q, false)?;
        q.finish(Self::OPTIONS)?;
        let hosts = hosts
            .iter()
            .map(|h| parse_host(url, h))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            hosts,
            chroot: parse_chroot(url, &path)?,
            session_timeout,
            digest,
            container_parents: true,
            timeout,
            connect_timeout,
            tls,
        })
    }

    /// The hosts as a ZooKeeper connect string, without the chroot.
    pub fn connect_string(&self) -> String {
        self.hosts.join(",")
    }
}

/// The options of a backend made with
/// [`ZkBackend::from_client`](crate::ZkBackend::from_client): those of a
/// `zk://` URL that do not concern the session, with the same defaults and
/// checks.
///
/// ```
/// use std::time::Duration;
/// use lock_zk::config::ZkOptions;
///
/// let options = ZkOptions::new().chroot("/app/locks").timeout(Duration::from_secs(1));
/// ```
#[derive(Clone, Debug)]
pub struct ZkOptions {
    pub(crate) chroot: String,
    pub(crate) timeout: Duration,
    pub(crate) creator_only: bool,
    pub(crate) container_parents: bool,
}

impl Default for ZkOptions {
    fn default() -> Self {
        Self {
            chroot: String::new(),
            timeout: ZkConfig::DEFAULT_TIMEOUT,
            creator_only: false,
            container_parents: true,
        }
    }
}

impl ZkOptions {
    /// The defaults: no chroot, a 3 s timeout, open ACLs, container
    /// parents.
    pub fn new() -> Self {
        Self::default()
    }

    /// A path every lock lives under, below the client's own chroot if it
    /// has one, as a URL's path is (`/app/locks`); created (persistent) if
    /// missing.
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = chroot.into();
        self
    }

    /// The longest one request may take (URL option `timeout`); more than
    /// zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Gives every node distlock creates the creator-only ACL
    /// (`Acls::creator_all`), as a URL with `auth` does: only sessions
    /// authenticated as the same identity may touch them. The client must
    /// have authenticated (digest, SASL). Off by default: the nodes are
    /// open to anyone (`Acls::anyone_all`).
    pub fn creator_only(mut self, on: bool) -> Self {
        self.creator_only = on;
        self
    }

    /// As [`ZkConfig::container_parents`].
    pub fn container_parents(mut self, on: bool) -> Self {
        self.container_parents = on;
        self
    }

    /// The options, checked as a URL's are (the chroot normalised as a
    /// URL's path is); a mistake is an [`Error::InvalidConfig`] naming the
    /// option.
    pub(crate) fn check(self) -> Result<Self> {
        let path = format!("/{}", self.chroot.trim_start_matches('/'));
        let chroot = parse_chroot(&format!("zk://…{path}"), &path)
            .map_err(|e| e.into_config(crate::NAME))?;
        if self.timeout.is_zero() {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"timeout\" must be more than zero",
            ));
        }
        Ok(Self { chroot, ..self })
    }
}

fn parse_host(url: &str, host: &str) -> Result<String> {
    if host.is_empty() {
        return Err(Error::invalid_url(url, "an empty host in the server list"));
    }
    if host.contains('@') {
        return Err(Error::invalid_url(
            url,
            "give credentials as ?auth=digest:USER:PASSWORD",
        ));
    }
    let (name, port) = match host.rsplit_once(':') {
        Some((name, _)) if !name.ends_with(']') && name.contains(':') => {
            return Err(Error::invalid_url(
                url,
                format!("write the IPv6 address {host} in brackets: [addr]:port"),
            ));
        }
        Some((name, port)) => (name, port),
        None => (host, ""),
    };
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid_url(url, format!("bad host \"{host}\"")));
    }
    let port = if port.is_empty() {
        ZkConfig::DEFAULT_PORT
    } else {
        port.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| Error::invalid_url(url, format!("bad port in \"{host}\"")))?
    };
    Ok(format!("{name}:{port}"))
}

fn parse_chroot(url: &str, path: &str) -> Result<String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    for segment in trimmed.split('/').skip(1) {
        let bad = segment.is_empty()
            || segment == "."
            || segment == ".."
            || segment.chars().any(|c| c.is_whitespace() || c.is_control());
        if bad {
            return Err(Error::invalid_url(
                url,
                format!(
                    "bad chroot \"{trimmed}\": segments must be non-empty, not . or .., \
                     without spaces or control characters"
                ),
            ));
        }
    }
    if trimmed == "/zookeeper" || trimmed.starts_with("/zookeeper/") {
        return Err(Error::invalid_url(
            url,
            "the chroot must not be under /zookeeper, which ZooKeeper reserves",
        ));
    }
    Ok(trimmed.to_owned())
}

/// The user and, unless `from_file`, the password of `auth`.
fn parse_auth(url: &str, auth: &str, from_file: bool) -> Result<(String, Option<String>)> {
    let bad = || {
        Error::invalid_url(
            url,
            "option \"auth\" must be digest:USER:PASSWORD, or digest:USER with \"password_file\" (the only scheme supported)",
        )
    };
    let rest = auth.strip_prefix("digest:").ok_or_else(bad)?;
    let (user, password) = match rest.split_once(':') {
        Some((user, password)) => (user, Some(password.to_owned())),
        None if from_file => (rest, None),
        None => return Err(bad()),
    };
    if user.is_empty() {
        return Err(bad());
    }
    Ok((user.to_owned(), password))
}

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "zookeeper";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["zk"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_as_a_url_is() {
        let chroot = |c: &str| ZkOptions::new().chroot(c).check().map(|o| o.chroot);
        assert_eq!(chroot("app/locks/").unwrap(), "/app/locks");
        assert_eq!(chroot("/app").unwrap(), "/app");
        assert_eq!(chroot("").unwrap(), "");
        for (bad, expected) in [("/a//b", "segments"), ("/zookeeper/x", "reserves")] {
            let err = chroot(bad).unwrap_err();
            assert!(
                err.is_invalid_input() && err.to_string().contains(expected),
                "{err}"
            );
        }
        let err = ZkOptions::new()
            .timeout(Duration::ZERO)
            .check()
            .unwrap_err();
        assert!(err.to_string().contains("more than zero"), "{err}");
    }

    #[test]
    fn parses_hosts_chroot_and_options() {
        let c = ZkConfig::parse(
            "zk://127.0.0.1:2181,127.0.0.2/app/locks/?session_timeout=4s&auth=digest:bob:hun:ter2&timeout=1s",
        )
        .unwrap();
        assert_eq!(c.hosts, ["127.0.0.1:2181", "127.0.0.2:2181"]);
        assert_eq!(c.chroot, "/app/locks");
        assert_eq!(c.session_timeout, Duration::from_secs(4));
        assert_eq!(c.timeout, Duration::from_secs(1));
        assert_eq!(
            c.digest,
            Some(("bob".to_owned(), Password::Given("hun:ter2".to_owned()))),
            "the password is everything after the user"
        );
        let from_file = ZkConfig::parse("zk://h:1?auth=digest:bob&password_file=/run/zk").unwrap();
        assert_eq!(
            from_file.digest,
            Some(("bob".to_owned(), Password::File("/run/zk".into())))
        );
        for (url, expected) in [
            (
                "zk://h:1?password_file=/run/zk",
                "needs \"auth=digest:USER\"",
            ),
            ("zk://h:1?auth=digest:bob:pw&password_file=/run/zk", "both"),
            ("zk://h:1?auth=digest:bob", "digest:USER:PASSWORD"),
        ] {
            let err = ZkConfig::parse(url).unwrap_err().to_string();
            assert!(err.contains(expected), "{url}: {err}");
        }
        assert_eq!(c.connect_string(), "127.0.0.1:2181,127.0.0.2:2181");
        let plain = ZkConfig::parse("zk://h:1").unwrap();
        assert_eq!(plain.chroot, "");
        assert_eq!(plain.session_timeout, ZkConfig::DEFAULT_SESSION_TIMEOUT);
        assert!(plain.container_parents);
        assert_eq!(
            ZkConfig::parse("zk://[::1]:2181/").unwrap().hosts,
            ["[::1]:2181"]
        );
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = ZkConfig::parse("zk://h:1?auth=digest:bob:hunter2").unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("bob"),
            "{shown}"
        );
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, why) in [
            ("zk://h:1?auth=sasl:x", "digest:USER:PASSWORD"),
            ("zk://h:1?auth=digest:nopassword", "digest:USER:PASSWORD"),
            ("zk://u:p@h:1", "?auth=digest"),
            ("zk://h:1,,h:2", "empty host"),
            ("zk://h:port", "bad port"),
            ("zk://h:1//x", "bad chroot"),
            ("zk://h:1/a/../b", "bad chroot"),
            ("zk://h:1/zookeeper/x", "reserves"),
            ("zk://h:1?session_timeout=0s", "more than zero"),
            ("zk://h:1?session_timeout=10", "no unit"),
            ("zk://h:1?bogus=1", "accepted options"),
            ("etcd://h:1", "expected zk://"),
        ] {
            let err = ZkConfig::parse(url).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(why), "{url}: {text}");
        }
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = ZkConfig::parse("zk://h:1?auth=digest:bob:hunter2&bogus=1").unwrap_err();
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
    }
}
