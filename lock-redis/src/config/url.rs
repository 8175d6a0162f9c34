//! `redis://` URLs and their TLS, cluster and sentinel forms, read into a
//! [`RedisConfig`].

use lock_core::backend::QueryOptions;
use lock_core::secret::{PASSWORD_FILE, Password};
use lock_core::url::{host_with_port, userinfo};
use lock_core::{Error, Result};

use super::{RedisConfig, Server, Topology};
use lock_core::tls::TlsOptions;

/// The options every form of URL reads (`wait_*` aside).
const COMMON: &[&str] = &[
    "prefix",
    "timeout",
    "connect_timeout",
    "allow_eviction",
    TlsOptions::URL_OPTIONS[0],
    TlsOptions::URL_OPTIONS[1],
    TlsOptions::URL_OPTIONS[2],
    TlsOptions::URL_OPTIONS[3],
    PASSWORD_FILE,
];
const WAIT: &[&str] = &["wait_replicas", "wait_timeout"];

/// What a URL's scheme names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Single,
    Cluster,
    Sentinel,
}

impl Kind {
    /// The kind, and what follows its `scheme://`.
    fn of(url: &str) -> Result<(Self, &str)> {
        for (kind, schemes) in [
            (Kind::Single, ["redis://", "rediss://"]),
            (Kind::Cluster, ["redis+cluster://", "rediss+cluster://"]),
            (Kind::Sentinel, ["redis+sentinel://", "rediss+sentinel://"]),
        ] {
            if let Some(rest) = schemes.iter().find_map(|s| url.strip_prefix(s)) {
                return Ok((kind, rest));
            }
        }
        Err(Error::invalid_url(
            url,
            "expected redis://, rediss://, redis[s]+cluster:// or redis[s]+sentinel://",
        ))
    }
}

impl RedisConfig {
    /// Reads `redis[s]://[user:password@]host[:port][/db][?options]`;
    /// `redis[s]+cluster://[user:password@]host:port,host:port,…[?options]`
    /// for a Redis Cluster reached through those seed nodes; or
    /// `redis[s]+sentinel://[user:password@]host:port,host:port,…/MASTER[?options]`
    /// for the master that those sentinels name `MASTER`, the user and
    /// password being the data nodes'. `rediss` schemes use TLS, as
    /// `tls=true` does. Checked as
    /// [`RedisBackend::connect_with`](crate::RedisBackend::connect_with)
    /// checks; a mistake is an [`Error::InvalidUrl`].
    pub fn from_url(url: &str) -> Result<Self> {
        parse(url)
    }
}

/// Reads `url` into a config, then checks it as
/// [`RedisConfig::check`] does.
fn parse(url: &str) -> Result<RedisConfig> {
    let (kind, rest) = Kind::of(url)?;
    let mut q = QueryOptions::parse(url)?;
    let defaults = RedisConfig::default();
    let mut config = RedisConfig {
        prefix: q.take("prefix").unwrap_or(defaults.prefix),
        timeout: q.take_duration("timeout")?.unwrap_or(defaults.timeout),
        connect_timeout: q
            .take_duration("connect_timeout")?
            .unwrap_or(defaults.connect_timeout),
        allow_eviction: q.take_bool("allow_eviction", false)?,
        tls: TlsOptions::from_query(&mut q, url.starts_with("rediss"))?,
        ..defaults
    };
    let password_file = Password::from_query(&mut q, None)?;
    if kind == Kind::Cluster {
        q.finish(COMMON).map_err(|e| match e {
            Error::InvalidUrl { url, reason, .. } if reason.contains("wait_") => {
                Error::invalid_url(
                    &url,
                    format!("{reason} (a cluster has no WAIT for replicas)"),
                )
            }
            e => e,
        })?;
    } else {
        config.wait_replicas = q
            .take_parsed::<u32>("wait_replicas", "a whole number")?
            .unwrap_or(0);
        if let Some(timeout) = q.take_duration("wait_timeout")? {
            config.wait_timeout = timeout;
            if config.wait_replicas == 0 {
                return Err(Error::invalid_url(
                    url,
                    "option \"wait_timeout\" needs \"wait_replicas\" of 1 or more",
                ));
            }
        }
        q.finish(&[COMMON, WAIT].concat())?;
    }
    let base = rest.split_once('?').map_or(rest, |(b, _)| b);
    // A sentinel URL's master name may hold an `@`: its user-info ends
    // before the first `/`. Elsewhere the last `@` ends it, so that a
    // password may hold a `/`.
    let authority_end = match kind {
        Kind::Sentinel => base.find('/').unwrap_or(base.len()),
        _ => base.len(),
    };
    let (credentials, hosts) = match base[..authority_end].rfind('@') {
        Some(at) => (Some(&base[..at]), &base[at + 1..]),
        None => (None, base),
    };
    let (username, password) = credentials_of(url, credentials, password_file)?;
    config.topology = match kind {
        Kind::Single => {
            let (host, db) = hosts.split_once('/').unwrap_or((hosts, ""));
            let db = match db {
                "" => 0,
                db => db.parse().map_err(|_| {
                    Error::invalid_url(url, format!("database \"{db}\" is not a number"))
                })?,
            };
            let addr = host_with_port(url, host, 6379, "redis://HOST[:PORT][/DB]")?;
            Topology::Single(Server {
                addr,
                db,
                username,
                password,
            })
        }
        Kind::Cluster => {
            if hosts.contains('/') {
                return Err(Error::invalid_url(
                    url,
                    "a cluster has only database 0: expected redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…",
                ));
            }
            let seeds = hosts
                .split(',')
                .map(|host| {
                    Ok(Server {
                        addr: host_with_port(url, host, 6379, "redis+cluster://HOST:PORT,…")?,
                        db: 0,
                        username: username.clone(),
                        password: password.clone(),
                    })
                })
                .collect::<Result<_>>()?;
            Topology::Cluster(seeds)
        }
        Kind::Sentinel => {
            let shape =
                "expected redis+sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…/MASTER_NAME";
            let (hosts, master) = hosts
                .split_once('/')
                .filter(|(_, m)| !m.is_empty() && !m.contains('/'))
                .ok_or_else(|| Error::invalid_url(url, format!("no master name: {shape}")))?;
            let sentinels = hosts
                .split(',')
                .map(|h| host_with_port(url, h, 26379, shape))
                .collect::<Result<_>>()?;
            Topology::Sentinel {
                sentinels,
                master: percent_encoding::percent_decode_str(master)
                    .decode_utf8()
                    .map_err(|_| Error::invalid_url(url, "the master name is not UTF-8"))?
                    .into_owned(),
                username,
                password,
            }
        }
    };
    config.check().map_err(|e| e.into_url(url))?;
    Ok(config)
}

/// The user and password of a URL's user-info, or the password file;
/// both a password and a file is a contradiction.
fn credentials_of(
    url: &str,
    credentials: Option<&str>,
    password_file: Option<Password>,
) -> Result<(Option<String>, Option<Password>)> {
    let (username, given) = credentials.map_or(Ok((None, None)), |c| userinfo(url, c))?;
    let password = match (given, password_file) {
        (Some(_), Some(_)) => return Err(lock_core::secret::given_twice(url)),
        (Some(p), None) => Some(Password::Given(p)),
        (None, file) => file,
    };
    Ok((username, password))
}
