//! What each backend's `DISTLOCK_TEST_<BACKEND>_URL` variable may hold:
//! schemes, hosts, credentials, the options the tests set themselves. The
//! URL parser (`url.rs`) and the variables' reader (`external.rs`) both
//! read it.

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
