//! Where the servers are: one server, a cluster's seed nodes, or the
//! sentinels that name a master.

use lock_core::secret::Password;
use lock_core::tls::TlsOptions;
use lock_core::{Error, Result};

/// One Redis server: its address, database and credentials. `Debug` never
/// shows the password.
///
/// ```
/// use lock_core::secret::Password;
/// use lock_redis::Server;
///
/// let server = Server::new("10.0.0.7:6379").db(2).username("app").password(Password::File("/run/redis-pw".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Server {
    /// `host:port` (port 6379 when a URL names none).
    pub addr: String,
    /// The database number (a URL's path; 0 unless given).
    pub db: u32,
    /// The ACL user (a URL's user-info); the `default` user when `None`.
    pub username: Option<String>,
    /// The password (a URL's user-info, or option `password_file`).
    pub password: Option<Password>,
}

impl Server {
    /// The server at `addr` (`host:port`), database 0, no credentials.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            db: 0,
            username: None,
            password: None,
        }
    }

    lock_core::setters! {
        /// The database number.
        db: u32;
    }

    /// The ACL user.
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The password, or the file that holds it (read at each connect).
    pub fn password(mut self, password: Password) -> Self {
        self.password = Some(password);
        self
    }

    /// A `redis::Client` of this server, over TLS when `tls` is on (with
    /// its CA and client certificate); a password file is read now, and a
    /// missing one is an error naming it.
    pub fn client(&self, tls: &TlsOptions) -> Result<redis::Client> {
        use redis::IntoConnectionInfo as _;
        let scheme = if tls.is_enabled() { "rediss" } else { "redis" };
        let invalid = |e: redis::RedisError| Error::invalid_config(crate::NAME, e.to_string());
        let mut info = format!("{scheme}://{}", self.addr)
            .into_connection_info()
            .map_err(invalid)?;
        let mut settings = info.redis_settings().clone().set_db(self.db.into());
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password.read(crate::NAME)?);
        }
        info = info.set_redis_settings(settings);
        let client = match crate::tls::certificates(tls)? {
            None => redis::Client::open(info),
            Some(certificates) => redis::Client::build_with_tls(info, certificates),
        };
        client.map_err(invalid)
    }

    /// Refuses an address the driver could not use.
    pub(super) fn check(&self) -> Result<()> {
        lock_core::url::check_addr(crate::NAME, &self.addr)
    }
}

/// How the servers a [`RedisConfig`](crate::RedisConfig) names are
/// arranged.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// One server (`redis://`, `rediss://`).
    Single(Server),
    /// A Redis Cluster reached through these seed nodes, any of its nodes
    /// (`redis+cluster://`); the client learns the rest. The first seed's
    /// user and password are every node's, and a cluster has only
    /// database 0.
    Cluster(Vec<Server>),
    /// The master that these sentinels name `master`, followed across
    /// failovers (`redis+sentinel://`).
    Sentinel {
        /// The sentinels, `host:port` (port 26379 when a URL names none).
        sentinels: Vec<String>,
        /// The name the sentinels know the master by.
        master: String,
        /// The data nodes' ACL user.
        username: Option<String>,
        /// The data nodes' password.
        password: Option<Password>,
    },
}

impl Topology {
    /// `host:port,…` of the servers, for messages.
    pub(crate) fn label(&self) -> String {
        match self {
            Topology::Single(server) => server.addr.clone(),
            Topology::Cluster(seeds) => {
                let addrs: Vec<&str> = seeds.iter().map(|s| s.addr.as_str()).collect();
                format!("cluster {}", addrs.join(","))
            }
            Topology::Sentinel {
                sentinels, master, ..
            } => format!("sentinel {master}@{}", sentinels.join(",")),
        }
    }

    /// Every address present and well formed; a cluster's seeds on
    /// database 0 with one set of credentials.
    pub(super) fn check(&self) -> Result<()> {
        let invalid = |reason: &str| Err(Error::invalid_config(crate::NAME, reason));
        match self {
            Topology::Single(server) => server.check(),
            Topology::Cluster(seeds) => {
                let Some(first) = seeds.first() else {
                    return invalid("a cluster needs at least one seed node");
                };
                seeds.iter().try_for_each(Server::check)?;
                if seeds.iter().any(|s| s.db != 0) {
                    return invalid("a cluster has only database 0");
                }
                let same =
                    |s: &Server| s.username == first.username && s.password == first.password;
                if !seeds.iter().all(same) {
                    return invalid("a cluster's seed nodes share one user and password");
                }
                Ok(())
            }
            Topology::Sentinel {
                sentinels, master, ..
            } => {
                if master.is_empty() {
                    return invalid("no master name for the sentinels");
                }
                if sentinels.is_empty() {
                    return invalid("no sentinel");
                }
                sentinels.iter().try_for_each(|s| split_addr(s).map(drop))
            }
        }
    }
}

/// `(host, port)` of a `host:port` address, the host without IPv6
/// brackets.
pub(super) fn split_addr(addr: &str) -> Result<(String, u16)> {
    let bad = || {
        Error::invalid_config(
            crate::NAME,
            format!("bad address \"{addr}\": expected HOST:PORT"),
        )
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse().map_err(|_| bad())?;
    let host = host.trim_matches(['[', ']']);
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}
