//! `zk://h1:p1,h2:p2[/chroot][?options]` URLs → [`ZkConfig`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::{HostList, QueryOptions};
use lock_core::secret::{PASSWORD_FILE, Password};
use lock_core::tls::TlsOptions;
use lock_core::url::check_positive;
use lock_core::{Error, Result};

/// Everything a [`ZkBackend`](crate::ZkBackend) is made from:
/// [`from_url`](Self::from_url) (or `str::parse`) reads a
/// `zk://host:port,host:port[/chroot][?options]` URL; [`Default`] and the
/// setters build one in code. Either way it is checked when the backend is
/// made, so a field changed afterwards is checked too. `Debug` never shows
/// the password.
///
/// [`ZkBackend::from_client`](crate::ZkBackend::from_client) takes one too,
/// and uses only its [`chroot`](Self::chroot), [`timeout`](Self::timeout),
/// [`creator_only`](Self::creator_only) and
/// [`container_parents`](Self::container_parents).
///
/// ```
/// use std::time::Duration;
/// use lock_core::secret::Password;
/// use lock_zk::ZkConfig;
///
/// let config = ZkConfig::default()
///     .hosts(["10.0.0.1:2181", "10.0.0.2:2181"])
///     .chroot("/app/locks")
///     .digest("app", Password::File("/run/secrets/zk".into()))
///     .timeout(Duration::from_secs(1));
/// let same: ZkConfig =
///     "zk://10.0.0.1,10.0.0.2/app/locks?auth=digest:app&password_file=/run/secrets/zk&timeout=1s"
///         .parse()?;
/// assert_eq!(format!("{config:?}"), format!("{same:?}"));
/// assert!(config.creator_only, "digest credentials make nodes creator-only");
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ZkConfig {
    /// `host:port` of each server (the URL's hosts; default
    /// `127.0.0.1:2181`); port 2181 where none is given.
    pub hosts: Vec<String>,
    /// The ZooKeeper chroot every path lives under (the URL's path; default
    /// none): empty, or `/a/b` (a missing leading `/` is added, a trailing
    /// one dropped). Created (persistent) if missing; not under
    /// `/zookeeper`.
    pub chroot: String,
    /// The session timeout to ask for (URL option `session_timeout`,
    /// default 10 s); the server clamps it to its
    /// `minSessionTimeout`..`maxSessionTimeout`.
    pub session_timeout: Duration,
    /// `digest` user name and password (URL option `auth=digest:USER:PASSWORD`,
    /// or `auth=digest:USER` with `password_file` for a file read at each
    /// new session; default none): the session authenticates with them.
    /// A URL with `auth`, and the [`digest`](Self::digest) setter, also turn
    /// [`creator_only`](Self::creator_only) on.
    pub digest: Option<(String, Password)>,
    /// Give every node distlock creates the creator-only ACL
    /// (`Acls::creator_all`): only sessions authenticated as the same
    /// identity may see or touch them (default off: `Acls::anyone_all`).
    /// No URL option of its own: a URL with `auth` turns it on, one without
    /// leaves it off, as does the [`digest`](Self::digest) setter; set it
    /// after those to change that. The session must be authenticated
    /// (digest, or a client certificate the servers map to an identity; for
    /// [`from_client`](crate::ZkBackend::from_client), the client's own
    /// authentication).
    pub creator_only: bool,
    /// Create lock parents as container nodes, which the server deletes once
    /// they are empty (ZooKeeper 3.5 and later; default on, no URL option).
    /// When this is off, or the server does not know container nodes,
    /// parents are ordinary persistent nodes that distlock deletes itself
    /// after a release leaves them empty.
    pub container_parents: bool,
    /// Bounds each request (URL option `timeout`, default 3 s).
    pub timeout: Duration,
    /// Bounds the making of a session (URL option `connect_timeout`,
    /// default 5 s).
    pub connect_timeout: Duration,
    /// TLS to servers with a `secureClientPort` (URL options `tls`,
    /// `tls_ca`, `tls_cert`, `tls_key`; default off). `tls=true` trusts the
    /// system's store.
    pub tls: TlsOptions,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkConfig")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("session_timeout", &self.session_timeout)
            .field("user", &self.digest.as_ref().map(|(u, _)| u))
            .field("creator_only", &self.creator_only)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("container_parents", &self.container_parents)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Default for ZkConfig {
    fn default() -> Self {
        Self {
            hosts: vec![format!("127.0.0.1:{}", Self::DEFAULT_PORT)],
            chroot: String::new(),
            session_timeout: Self::DEFAULT_SESSION_TIMEOUT,
            digest: None,
            creator_only: false,
            container_parents: true,
            timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            tls: TlsOptions::default(),
        }
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

    /// Reads `zk://host:port,host:port[/chroot][?session_timeout=…&auth=digest:user:password&timeout=…&connect_timeout=…]`
    /// (`auth=digest:user&password_file=PATH` reads the password from a
    /// file), with the same checks as
    /// [`ZkBackend::connect_with`](crate::ZkBackend::connect_with) makes; a
    /// mistake is an [`Error::InvalidUrl`]. `auth` also turns
    /// [`creator_only`](Self::creator_only) on.
    pub fn from_url(url: &str) -> Result<Self> {
        let HostList { hosts, path, .. } = HostList::parse(url, crate::SCHEMES[0])?;
        let chroot = if path.is_empty() {
            String::new()
        } else {
            format!("/{path}")
        };
        let mut q = QueryOptions::parse(url)?;
        let auth = q.take("auth");
        let from_file = q.contains(PASSWORD_FILE);
        let defaults = Self::default();
        let session_timeout = q
            .take_duration("session_timeout")?
            .unwrap_or(defaults.session_timeout);
        let timeout = q.take_duration("timeout")?.unwrap_or(defaults.timeout);
        let connect_timeout = q
            .take_duration("connect_timeout")?
            .unwrap_or(defaults.connect_timeout);
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
        if hosts.iter().any(|h| h.contains('@')) {
            return Err(Error::invalid_url(
                url,
                "give credentials as ?auth=digest:USER:PASSWORD",
            ));
        }
        let config = Self {
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            chroot,
            session_timeout,
            creator_only: digest.is_some(),
            digest,
            container_parents: defaults.container_parents,
            timeout,
            connect_timeout,
            tls,
        };
        config.check().map_err(|e| e.into_url(url))
    }

    /// The servers, each `host[:port]` (the URL's hosts).
    pub fn hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    lock_core::setters! {
        /// A path every lock lives under, as a URL's path is (`/app/locks`);
        /// created (persistent) if missing. With
        /// [`from_client`](crate::ZkBackend::from_client), below the client's
        /// own chroot if it has one.
        chroot: into String;
        /// The session timeout to ask for (URL option `session_timeout`); more
        /// than zero.
        session_timeout: Duration;
    }

    /// Authenticates the session as `user` with the `digest` scheme (URL
    /// option `auth=digest:USER:PASSWORD`, or `password_file`), and, as a
    /// URL's `auth` does, turns [`creator_only`](Self::creator_only) on;
    /// call `.creator_only(false)` after it to leave the nodes open.
    pub fn digest(mut self, user: impl Into<String>, password: Password) -> Self {
        self.digest = Some((user.into(), password));
        self.creator_only = true;
        self
    }

    lock_core::setters! {
        /// Gives every node distlock creates the creator-only ACL, as a URL
        /// with `auth` does: only sessions authenticated as the same identity
        /// may touch them (see [`creator_only`](Self::creator_only)).
        creator_only: bool;
        /// Lock parents as container nodes (see
        /// [`container_parents`](Self::container_parents)).
        container_parents: bool;
        /// The longest one request may take (URL option `timeout`); more than
        /// zero.
        timeout: Duration;
        /// The longest wait for a session (URL option `connect_timeout`); more
        /// than zero.
        connect_timeout: Duration;
        /// TLS, and what it trusts and presents (URL options `tls`, `tls_ca`,
        /// `tls_cert`, `tls_key`).
        tls: TlsOptions;
    }

    /// The hosts as a ZooKeeper connect string, without the chroot.
    pub fn connect_string(&self) -> String {
        self.hosts.join(",")
    }

    /// The one check of every field, whether it came from a URL or from
    /// code; a mistake is an [`Error::InvalidConfig`] naming the option.
    /// Gives the config normalised: each host with its port, the chroot
    /// `/a/b` or empty.
    pub(crate) fn check(&self) -> Result<Self> {
        if self.hosts.is_empty() {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"hosts\" must name at least one server",
            ));
        }
        let hosts = self
            .hosts
            .iter()
            .map(|h| check_host(h))
            .collect::<Result<Vec<_>>>()?;
        let chroot = check_chroot(&self.chroot)?;
        check_positive(
            crate::NAME,
            &[
                ("session_timeout", self.session_timeout),
                ("timeout", self.timeout),
                ("connect_timeout", self.connect_timeout),
            ],
        )?;
        if let Some((user, _)) = &self.digest
            && user.is_empty()
        {
            return Err(Error::invalid_config(
                crate::NAME,
                "option \"auth\": the digest user must not be empty",
            ));
        }
        Ok(Self {
            hosts,
            chroot,
            ..self.clone()
        })
    }
}

impl FromStr for ZkConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        Self::from_url(url)
    }
}

/// `host` with its port (2181 where it names none), or an
/// [`Error::InvalidConfig`] naming the option `hosts`.
fn check_host(host: &str) -> Result<String> {
    let bad =
        |reason: String| Error::invalid_config(crate::NAME, format!("option \"hosts\": {reason}"));
    if host.is_empty() {
        return Err(bad("an empty host in the server list".to_owned()));
    }
    let (name, port) = match host.rsplit_once(':') {
        Some((name, _)) if !name.ends_with(']') && name.contains(':') => {
            return Err(bad(format!(
                "write the IPv6 address {host} in brackets: [addr]:port"
            )));
        }
        Some((name, port)) => (name, port),
        None => (host, ""),
    };
    let odd = |c: char| c.is_whitespace() || c.is_control() || c == '@' || c == '/' || c == ',';
    if name.is_empty() || name.chars().any(odd) {
        return Err(bad(format!("bad host \"{host}\"")));
    }
    let port = if port.is_empty() {
        ZkConfig::DEFAULT_PORT
    } else {
        port.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad(format!("bad port in \"{host}\"")))?
    };
    Ok(format!("{name}:{port}"))
}

/// `chroot` as `/a/b` (a leading `/` added if missing, a trailing one
/// dropped) or empty, or an [`Error::InvalidConfig`] naming the option
/// `chroot`.
fn check_chroot(chroot: &str) -> Result<String> {
    let rooted = if chroot.starts_with('/') {
        chroot.to_owned()
    } else {
        format!("/{chroot}")
    };
    let trimmed = rooted.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    for segment in trimmed.split('/').skip(1) {
        let bad = segment.is_empty()
            || segment == "."
            || segment == ".."
            || segment.chars().any(|c| c.is_whitespace() || c.is_control());
        if bad {
            return Err(Error::invalid_config(
                crate::NAME,
                format!(
                    "option \"chroot\" (a URL's path): bad chroot \"{trimmed}\": segments must be \
                     non-empty, not . or .., without spaces or control characters"
                ),
            ));
        }
    }
    if trimmed == "/zookeeper" || trimmed.starts_with("/zookeeper/") {
        return Err(Error::invalid_config(
            crate::NAME,
            "option \"chroot\" (a URL's path) must not be under /zookeeper, which ZooKeeper reserves",
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

#[cfg(test)]
mod tests;
