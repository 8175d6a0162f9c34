//! Every backend's config type is checked once, when the backend connects:
//! a field set in code, or changed after `from_url`, meets the same check
//! as a URL, before anything is sent, as `Error::InvalidConfig` naming the
//! backend and the option. Nothing here needs a server: a check that
//! stopped running would try to connect and fail otherwise (or hang on
//! the unroutable addresses below until the test's bound).

use std::future::Future;
use std::time::Duration;

use distlock::Error;
use distlock::backends::etcd::{EtcdBackend, EtcdConfig};
use distlock::backends::memcache::{MemcacheBackend, MemcacheConfig};
use distlock::backends::redis::{RedisBackend, RedisConfig, Server, Topology};
use distlock::backends::redlock::{RedlockBackend, RedlockConfig};
use distlock::backends::sql::{SqlBackend, SqlConfig};
use distlock::backends::zk::{ZkBackend, ZkConfig};

/// `connect` ends within a bound, refused as a configuration mistake of
/// `backend` whose reason names `option`.
async fn refused<T: std::fmt::Debug>(
    connect: impl Future<Output = distlock::Result<T>>,
    backend: &str,
    option: &str,
) {
    let result = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .unwrap_or_else(|_| panic!("{backend} {option}: no answer: the check did not run"));
    match result {
        Err(Error::InvalidConfig {
            backend: b, reason, ..
        }) => {
            assert_eq!(b, backend, "{reason}");
            assert!(reason.contains(option), "{backend}: {reason}");
        }
        other => panic!("{backend} {option}: {other:?}"),
    }
}

#[tokio::test]
async fn memcache_checks_fields_set_in_code() {
    let mut parsed: MemcacheConfig = "memcache://127.0.0.1:1".parse().unwrap();
    parsed.pool_size = 0;
    refused(
        MemcacheBackend::connect_with(parsed),
        "memcache",
        "pool_size",
    )
    .await;
    let code = MemcacheConfig::default().prefix("a b");
    refused(MemcacheBackend::connect_with(code), "memcache", "prefix").await;
}

#[tokio::test]
async fn redis_checks_fields_set_in_code() {
    let mut parsed: RedisConfig = "redis://127.0.0.1:1".parse().unwrap();
    parsed.timeout = Duration::ZERO;
    refused(RedisBackend::connect_with(parsed), "redis", "\"timeout\"").await;
    let cluster = RedisConfig::default()
        .topology(Topology::Cluster(vec![Server::new("127.0.0.1:1")]))
        .wait_replicas(1, Duration::from_secs(1));
    refused(RedisBackend::connect_with(cluster), "redis", "WAIT").await;
    let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
    let config = RedisConfig::default().connect_timeout(Duration::ZERO);
    refused(
        RedisBackend::from_client(client, config),
        "redis",
        "connect_timeout",
    )
    .await;
}

#[tokio::test]
async fn redlock_checks_fields_set_in_code() {
    let mut parsed: RedlockConfig = "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
        .parse()
        .unwrap();
    parsed.masters.pop();
    refused(
        RedlockBackend::connect_with(parsed),
        "redlock",
        "odd number",
    )
    .await;
    let three = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"].map(Server::new);
    let code = RedlockConfig::default().masters(three).prefix("a#");
    refused(RedlockBackend::connect_with(code), "redlock", "prefix").await;
}

#[tokio::test]
async fn etcd_checks_fields_set_in_code() {
    let mut parsed: EtcdConfig = "etcd://127.0.0.1:1".parse().unwrap();
    parsed.connect_timeout = Duration::ZERO;
    refused(EtcdBackend::connect_with(parsed), "etcd", "connect_timeout").await;
    let code = EtcdConfig::default().prefix("a b");
    refused(EtcdBackend::connect_with(code), "etcd", "prefix").await;
}

#[tokio::test]
async fn zk_checks_fields_set_in_code() {
    let mut parsed: ZkConfig = "zk://127.0.0.1:1".parse().unwrap();
    parsed.timeout = Duration::ZERO;
    refused(ZkBackend::connect_with(parsed), "zookeeper", "timeout").await;
}

#[tokio::test]
async fn sql_checks_fields_set_in_code() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let mut parsed: SqlConfig = url.parse().unwrap();
    parsed.pool_size = 0;
    refused(SqlBackend::connect_with(parsed), "sqlite", "pool_size").await;
    assert!(
        !dir.path().join("locks.db").exists(),
        "refused before the database was opened"
    );
    let code = SqlConfig::from_url(&url).unwrap().table("locks; drop");
    refused(SqlBackend::connect_with(code), "sqlite", "table").await;
    refused(
        SqlBackend::connect_with(SqlConfig::default()),
        "sql",
        "from_url",
    )
    .await;
}
