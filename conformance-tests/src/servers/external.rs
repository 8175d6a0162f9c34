//! Servers the contributor runs instead of the ones the harness starts: one
//! `DISTLOCK_TEST_<BACKEND>_URL` variable per backend, and one each for a
//! Redis Cluster and Redis Sentinel (docker-compose.yml starts a server for
//! each but those two; the README lists the values).
//!
//! When a backend's variable is set, `shared()` of that backend's server
//! type (the server every test of a test binary shares) is the server the
//! variable names, and the harness starts none for those tests. Tests that
//! stop, freeze, restart or reconfigure a server, or need a cluster of
//! several, call `start()` and still get a server of their own: they cannot
//! do that to somebody else's. Tests stay apart on one server as they do on
//! the harness's: each makes its own table, key prefix or chroot
//! ([`crate::targets::fresh_table`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

use super::url::ServerUrl;

/// What the tests of one backend accept in its variable.
#[derive(Debug)]
pub struct Backend {
    /// The `distlock` cargo feature of the backend.
    pub feature: &'static str,
    /// The environment variable.
    pub variable: &'static str,
    /// The server's name in messages.
    pub label: &'static str,
    /// The URL schemes accepted.
    pub schemes: &'static [&'static str],
    /// The port of a host written without one.
    pub default_port: u16,
    /// Whether the URL may list several hosts (a cluster, Redlock's masters).
    pub many_hosts: bool,
    /// Whether credentials go before the host.
    pub userinfo: Userinfo,
    /// Where this backend's credentials go instead, when `userinfo` is
    /// [`Userinfo::Refused`].
    pub credentials_hint: &'static str,
    /// Whether the URL may have a path (a database). Where the path is a
    /// key prefix or a chroot, each test picks its own.
    pub path: bool,
    /// Query options each test sets itself.
    pub reserved: &'static [&'static str],
    /// A URL of the right form, for messages.
    pub example: &'static str,
    /// Whether docker-compose.yml runs a server for this variable (and
    /// the README exports its URL).
    pub compose: bool,
}

/// Credentials before the host (`user:password@host`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Userinfo {
    /// A password is required: tests check that a wrong one is refused and
    /// that none is ever shown.
    PasswordRequired,
    /// Optional.
    Allowed,
    /// Not in this form.
    Refused,
}

/// PostgreSQL.
pub const POSTGRES: Backend = Backend {
    feature: "postgres",
    variable: "DISTLOCK_TEST_POSTGRES_URL",
    label: "PostgreSQL",
    schemes: &["postgres", "postgresql"],
    default_port: 5432,
    many_hosts: false,
    userinfo: Userinfo::PasswordRequired,
    credentials_hint: "",
    path: true,
    reserved: &["table"],
    example: "postgres://USER:PASSWORD@127.0.0.1:5432/DATABASE",
    compose: true,
};

/// MySQL or MariaDB.
pub const MYSQL: Backend = Backend {
    feature: "mysql",
    variable: "DISTLOCK_TEST_MYSQL_URL",
    label: "MySQL/MariaDB",
    schemes: &["mysql", "mariadb"],
    default_port: 3306,
    many_hosts: false,
    userinfo: Userinfo::PasswordRequired,
    credentials_hint: "",
    path: true,
    reserved: &["table"],
    example: "mariadb://USER:PASSWORD@127.0.0.1:3306/DATABASE",
    compose: true,
};

/// One Redis server.
pub const REDIS: Backend = Backend {
    feature: "redis",
    variable: "DISTLOCK_TEST_REDIS_URL",
    label: "Redis",
    schemes: &["redis", "rediss"],
    default_port: 6379,
    many_hosts: false,
    userinfo: Userinfo::PasswordRequired,
    credentials_hint: "",
    path: true,
    reserved: &["prefix"],
    example: "redis://USER:PASSWORD@127.0.0.1:6379",
    compose: true,
};

/// A Redis Cluster: any of its nodes, the credentials once, before the
/// first (see [`super::redis_cluster`]).
pub const REDIS_CLUSTER: Backend = Backend {
    feature: "redis",
    variable: "DISTLOCK_TEST_REDIS_CLUSTER_URL",
    label: "Redis Cluster",
    schemes: &["redis+cluster"],
    default_port: 6379,
    many_hosts: true,
    userinfo: Userinfo::PasswordRequired,
    credentials_hint: "",
    // A cluster has database 0 only.
    path: false,
    reserved: &["prefix"],
    example: "redis+cluster://USER:PASSWORD@127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
    // Each node tells clients the address it announces, which must reach
    // it both from the other nodes (in their containers) and from the
    // host: Docker's published ports give no such address.
    compose: false,
};

/// Redis Sentinel: the sentinels, the data nodes' credentials before the
/// first, the master's name as the path (see [`super::redis_sentinel`]).
pub const REDIS_SENTINEL: Backend = Backend {
    feature: "redis",
    variable: "DISTLOCK_TEST_REDIS_SENTINEL_URL",
    label: "Redis Sentinel",
    schemes: &["redis+sentinel"],
    default_port: 26379,
    many_hosts: true,
    userinfo: Userinfo::PasswordRequired,
    credentials_hint: "",
    path: true,
    reserved: &["prefix"],
    example: "redis+sentinel://USER:PASSWORD@127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/MASTER_NAME",
    // Sentinels hand clients the master's address, which must reach it
    // from the sentinels' containers and from the host alike (as for the
    // cluster).
    compose: false,
};

/// Independent Redis masters for Redlock.
pub const REDLOCK: Backend = Backend {
    feature: "redlock",
    variable: "DISTLOCK_TEST_REDLOCK_URL",
    label: "Redlock",
    schemes: &["redlock"],
    default_port: 6379,
    many_hosts: true,
    userinfo: Userinfo::Allowed,
    credentials_hint: "",
    path: true,
    reserved: &["prefix"],
    example: "redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
    compose: true,
};

/// An etcd cluster.
pub const ETCD: Backend = Backend {
    feature: "etcd",
    variable: "DISTLOCK_TEST_ETCD_URL",
    label: "etcd",
    schemes: &["etcd"],
    default_port: 2379,
    many_hosts: true,
    userinfo: Userinfo::Refused,
    credentials_hint: "give them as ?user=…&password=…",
    path: false,
    reserved: &[],
    example: "etcd://127.0.0.1:2379",
    compose: true,
};

/// A ZooKeeper server or ensemble.
pub const ZK: Backend = Backend {
    feature: "zk",
    variable: "DISTLOCK_TEST_ZK_URL",
    label: "ZooKeeper",
    schemes: &["zk"],
    default_port: 2181,
    many_hosts: true,
    userinfo: Userinfo::Refused,
    credentials_hint: "give them as ?auth=digest:USER:PASSWORD",
    path: false,
    reserved: &[],
    example: "zk://127.0.0.1:2181",
    compose: true,
};

/// One memcached.
pub const MEMCACHE: Backend = Backend {
    feature: "memcache",
    variable: "DISTLOCK_TEST_MEMCACHE_URL",
    label: "memcached",
    schemes: &["memcache"],
    default_port: 11211,
    many_hosts: false,
    userinfo: Userinfo::Refused,
    credentials_hint: "memcached takes none",
    path: false,
    reserved: &["prefix"],
    example: "memcache://127.0.0.1:11211",
    compose: true,
};

/// Every backend that needs a server, and the Redis topologies: one
/// variable each.
pub const BACKENDS: &[&Backend] = &[
    &POSTGRES,
    &MYSQL,
    &REDIS,
    &REDIS_CLUSTER,
    &REDIS_SENTINEL,
    &REDLOCK,
    &ETCD,
    &ZK,
    &MEMCACHE,
];

/// The URL `backend`'s variable holds, checked; `None` when it is unset or
/// empty. A malformed value fails the test with a message naming the
/// variable, and so does a `DISTLOCK_TEST_…_URL` variable no backend has
/// (a typo would otherwise leave the harness starting servers unasked).
pub fn configured(backend: &Backend) -> Option<ServerUrl> {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("DISTLOCK_TEST_")
            && name.ends_with("_URL")
            && !BACKENDS.iter().any(|b| b.variable == name)
        {
            let known: Vec<&str> = BACKENDS.iter().map(|b| b.variable).collect();
            panic!(
                "{name} is set, but no backend reads it; the variables are {}",
                known.join(", ")
            );
        }
    }
    let text = match std::env::var(backend.variable) {
        Ok(text) => text,
        Err(std::env::VarError::NotPresent) => return None,
        Err(std::env::VarError::NotUnicode(_)) => {
            panic!("{} is not valid UTF-8", backend.variable)
        }
    };
    if text.trim().is_empty() {
        return None;
    }
    let url = ServerUrl::parse(backend, &text).unwrap_or_else(|why| {
        panic!(
            "{} is not a URL the {} tests can use: {why}. Expected e.g. {}",
            backend.variable, backend.label, backend.example
        )
    });
    Some(url)
}

/// The server `backend`'s variable names, once it accepts a connection
/// (for `ready_query`, the query options the check connects with); `None`
/// when the variable is unset. Says on stderr, once per test binary, which
/// server the tests use. A server that cannot be used fails the test with
/// a message naming the variable, at once for every later test too.
pub async fn external(backend: &Backend, ready_query: &str) -> Option<ServerUrl> {
    static REACHED: Mutex<BTreeMap<&str, Result<(), String>>> = Mutex::const_new(BTreeMap::new());
    let url = configured(backend)?;
    let mut reached = REACHED.lock().await;
    if !reached.contains_key(backend.variable) {
        let outcome = reach(backend, &url, ready_query).await;
        if outcome.is_ok() {
            // Straight to stderr, past the test harness's output capture.
            let line = format!(
                "distlock tests: the shared {} server is {} (from {}); none started\n",
                backend.label,
                url.redacted(),
                backend.variable
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        reached.insert(backend.variable, outcome);
    }
    if let Some(Err(why)) = reached.get(backend.variable) {
        panic!("{why}");
    }
    Some(url)
}

/// Connects once, retrying for a while if the server is still starting.
async fn reach(backend: &Backend, url: &ServerUrl, ready_query: &str) -> Result<(), String> {
    let target = url.url(ready_query);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match distlock::connect_backend(&target).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                return Err(format!(
                    "{} names {}, which the {} tests cannot use: {e}",
                    backend.variable,
                    url.redacted(),
                    backend.label
                ));
            }
        }
    }
}
