//! The lock services the suite runs against.

use std::sync::Arc;

use lock_core::MemoryBackend;
use lock_core::backend::{LockBackend, async_trait};

use crate::Target;

/// The in-process backend: every client is a clone of one [`MemoryBackend`].
#[derive(Debug, Default)]
pub struct MemoryTarget {
    backend: MemoryBackend,
}

impl MemoryTarget {
    /// A fresh, empty set of locks.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Target for MemoryTarget {
    fn label(&self) -> &str {
        "memory"
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.backend.clone())
    }

    fn url(&self) -> Option<String> {
        None
    }
}

/// Any backend reached by URL: every client connects anew, as a separate
/// process would.
#[derive(Debug)]
pub struct UrlTarget {
    label: &'static str,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

impl UrlTarget {
    /// A target for `url`.
    pub fn new(label: &'static str, url: String) -> Self {
        Self {
            label,
            url,
            _dir: None,
        }
    }

    /// A fresh SQLite file in a temporary directory.
    #[cfg(feature = "sqlite")]
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let url = format!(
            "{}://{}/locks.db",
            distlock::backends::sql::SQLITE_SCHEMES[0],
            dir.path().display()
        );
        Self {
            label: "sqlite",
            url,
            _dir: Some(dir),
        }
    }

    /// A fresh locks table on the shared PostgreSQL test server.
    #[cfg(feature = "postgres")]
    pub async fn postgres() -> Self {
        use crate::servers::SqlServer;
        let server = crate::servers::postgres::Postgres::shared().await;
        Self::new("postgres", server.url(&format!("table={}", fresh_table())))
    }

    /// A fresh locks table on the shared MariaDB test server.
    #[cfg(feature = "mysql")]
    pub async fn mariadb() -> Self {
        use crate::servers::SqlServer;
        let server = crate::servers::mariadb::Mariadb::shared().await;
        Self::new("mariadb", server.url(&format!("table={}", fresh_table())))
    }

    /// A fresh locks table on the shared PostgreSQL, made by the
    /// administrator and used by a team user granted that table alone
    /// (`create_tables=false`).
    #[cfg(feature = "postgres")]
    pub async fn postgres_granted() -> Self {
        use crate::servers::sql_teams::{SqlTeams, TEAMS};
        let teams = SqlTeams::postgres().await;
        Self::new(
            "postgres_granted",
            teams.granted(TEAMS[0], &fresh_table()).await,
        )
    }

    /// A fresh locks table on the shared MariaDB, made by the
    /// administrator and used by a team user granted that table alone
    /// (`create_tables=false`).
    #[cfg(feature = "mysql")]
    pub async fn mariadb_granted() -> Self {
        use crate::servers::sql_teams::{SqlTeams, TEAMS};
        let teams = SqlTeams::mariadb().await;
        Self::new(
            "mariadb_granted",
            teams.granted(TEAMS[0], &fresh_table()).await,
        )
    }

    /// A fresh locks table on the shared TLS-only PostgreSQL, reached with
    /// the test CA and a client certificate.
    #[cfg(feature = "postgres")]
    pub async fn postgres_tls() -> Self {
        use crate::servers::SqlServer;
        let server = crate::servers::postgres::Postgres::shared_tls().await;
        Self::new(
            "postgres_tls",
            server.url(&format!("table={}", fresh_table())),
        )
    }

    /// A fresh locks table on the shared MariaDB whose user needs TLS and
    /// a client certificate (`REQUIRE X509`).
    #[cfg(feature = "mysql")]
    pub async fn mariadb_tls() -> Self {
        use crate::servers::SqlServer;
        let server = crate::servers::mariadb::Mariadb::shared_tls().await;
        Self::new(
            "mariadb_tls",
            server.url(&format!("table={}", fresh_table())),
        )
    }

    /// A fresh key prefix on the shared Redis test server.
    #[cfg(feature = "redis")]
    pub async fn redis() -> Self {
        let server = crate::servers::redis::Redis::shared().await;
        Self::new("redis", server.url(&format!("prefix={}:", fresh_table())))
    }

    /// A fresh key prefix on the shared Redis Cluster (three masters, a
    /// replica each).
    #[cfg(feature = "redis")]
    pub async fn redis_cluster() -> Self {
        let cluster = crate::servers::redis_cluster::RedisCluster::shared().await;
        Self::new(
            "redis-cluster",
            cluster.url(&format!("prefix={}:", fresh_table())),
        )
    }

    /// A fresh key prefix on the master of the shared Sentinel setup.
    #[cfg(feature = "redis")]
    pub async fn redis_sentinel() -> Self {
        let sentinel = crate::servers::redis_sentinel::RedisSentinel::shared().await;
        Self::new(
            "redis-sentinel",
            sentinel.url(&format!("prefix={}:", fresh_table())),
        )
    }

    /// The same with `wait_replicas=1`: every grant and renewal confirmed
    /// by the replica, and fencing `Strict` (without it, `BestEffort`).
    #[cfg(feature = "redis")]
    pub async fn redis_sentinel_wait() -> Self {
        let sentinel = crate::servers::redis_sentinel::RedisSentinel::shared().await;
        Self::new(
            "redis-sentinel-wait",
            sentinel.url(&format!("prefix={}:&wait_replicas=1", fresh_table())),
        )
    }

    /// A fresh key prefix on the shared one-member etcd cluster.
    #[cfg(feature = "etcd")]
    pub async fn etcd() -> Self {
        let server = crate::servers::etcd::Etcd::shared().await;
        Self::new("etcd", server.url(&fresh_table(), ""))
    }

    /// A fresh key prefix on the shared TLS-only etcd, reached with the
    /// test CA and a client certificate.
    #[cfg(feature = "etcd")]
    pub async fn etcd_tls() -> Self {
        let server = crate::servers::etcd::Etcd::shared_tls().await;
        Self::new("etcd_tls", server.url(&fresh_table(), ""))
    }

    /// A fresh key prefix under `team-a/` on the shared etcd with auth on,
    /// as the user whose role may read and write `team-a/` only.
    #[cfg(feature = "etcd")]
    pub async fn etcd_auth() -> Self {
        let server = crate::servers::etcd_auth::EtcdAuth::shared().await;
        let (user, prefix) = crate::servers::etcd_auth::TEAMS[0];
        Self::new(
            "etcd_auth",
            server.url_as(user, &format!("{prefix}{}", fresh_table()), ""),
        )
    }

    /// A fresh chroot on the shared standalone ZooKeeper server.
    #[cfg(feature = "zk")]
    pub async fn zk() -> Self {
        let server = crate::servers::zookeeper::ZooKeeper::shared().await;
        Self::new("zk", server.url(&fresh_table(), ""))
    }

    /// A fresh chroot on the shared three-server ZooKeeper ensemble.
    #[cfg(feature = "zk")]
    pub async fn zk_ensemble() -> Self {
        let ensemble = crate::servers::zookeeper::ZooKeeper::shared_ensemble().await;
        Self::new("zk_ensemble", ensemble.url(&fresh_table(), ""))
    }

    /// A fresh chroot on the shared ZooKeeper, as a digest user: every node
    /// is the user's alone (creator-only ACLs).
    #[cfg(feature = "zk")]
    pub async fn zk_auth() -> Self {
        let server = crate::servers::zookeeper::ZooKeeper::shared().await;
        let auth = "auth=digest:distlock:distlock-pw";
        Self::new("zk_auth", server.url(&fresh_table(), auth))
    }

    /// A fresh chroot on the shared TLS-only ZooKeeper, reached with the
    /// test CA and a client certificate.
    #[cfg(feature = "zk")]
    pub async fn zk_tls() -> Self {
        let server = crate::servers::zookeeper::ZooKeeper::shared_tls().await;
        Self::new("zk_tls", server.url(&fresh_table(), ""))
    }

    /// A fresh key prefix on the shared memcached.
    #[cfg(feature = "memcache")]
    pub async fn memcache() -> Self {
        let server = crate::servers::memcached::Memcached::shared().await;
        Self::new(
            "memcache",
            server.url(&format!("prefix={}:", fresh_table())),
        )
    }

    /// A fresh key prefix on the shared TLS-only memcached, reached with
    /// the test CA and a client certificate.
    #[cfg(feature = "memcache")]
    pub async fn memcache_tls() -> Self {
        let server = crate::servers::memcached::Memcached::shared_tls().await;
        Self::new(
            "memcache_tls",
            server.url(&format!("prefix={}:", fresh_table())),
        )
    }

    /// A fresh key prefix on the shared TLS-only Redis, reached with the
    /// test CA and a client certificate.
    #[cfg(feature = "redis")]
    pub async fn redis_tls() -> Self {
        let server = crate::servers::redis::Redis::shared_tls().await;
        Self::new(
            "redis_tls",
            server.url(&format!("prefix={}:", fresh_table())),
        )
    }

    /// A fresh key prefix on three shared TLS-only Redis masters.
    #[cfg(feature = "redlock")]
    pub async fn redlock_tls() -> Self {
        let set = crate::servers::redis::RedisSet::shared_tls().await;
        Self::new(
            "redlock_tls",
            set.url(&format!("prefix={}:", fresh_table())),
        )
    }

    /// A fresh key prefix on five shared independent Redis masters.
    #[cfg(feature = "redlock")]
    pub async fn redlock() -> Self {
        let set = crate::servers::redis::RedisSet::shared().await;
        Self::new("redlock", set.url(&format!("prefix={}:", fresh_table())))
    }
}

/// A table name no other test uses, so each test also exercises creating
/// the table; also a key prefix or chroot. 64 random bits, because a server
/// named by a `DISTLOCK_TEST_*` variable keeps the names of every run.
pub fn fresh_table() -> String {
    format!("locks_{:016x}", rand::random::<u64>())
}

#[async_trait]
impl Target for UrlTarget {
    fn label(&self) -> &str {
        self.label
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        distlock::connect_backend(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", lock_core::url::redact(&self.url)))
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}
