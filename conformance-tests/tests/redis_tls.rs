//! Redis and Redlock over TLS (TLS-only servers, client certificates
//! required): TLS settings that cannot work are refused clearly and in
//! time, and the password is never in the error; a Redis Cluster and a
//! Sentinel topology over TLS grant, fence, release and wake a waiter.

use std::time::Duration;

use conformance_tests::servers::redis::{Redis, RedisSet};
use conformance_tests::servers::redis_cluster::RedisCluster;
use conformance_tests::servers::redis_sentinel::RedisSentinel;
use conformance_tests::targets::fresh_table;
use conformance_tests::tls_refusals::refused_clearly;
use lock_core::{AcquireOptions, Locker, Wait};
use tokio::time::Instant;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

/// `url` without its query, as `redis://`: TLS comes only from the options
/// each mistake adds (none, for plain text).
fn plain(url: &str) -> String {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    base.replacen("rediss://", "redis://", 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly() {
    let server = Redis::shared_tls().await;
    let base = plain(&server.url(""));
    let url = |tls: &str| {
        format!(
            "{base}?connect_timeout={}ms&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    refused_clearly("redis", url, 2 * CONNECT_TIMEOUT, Some(server.password())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly_by_redlock() {
    let set = RedisSet::shared_tls().await;
    let base = set.url("");
    let base = base.split_once('?').map_or(base.as_str(), |(b, _)| b);
    let url = |tls: &str| {
        format!(
            "{base}?connect_timeout={}ms&timeout=200ms&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    let password = set.nodes[0].password();
    refused_clearly("redlock", url, 2 * CONNECT_TIMEOUT, Some(password)).await;
}

/// Through `url`: a grant with a fencing token, the lock busy for another
/// client, a waiter woken by the release (well before the TTL), and its
/// token above the first.
async fn grant_fence_release_wake(url: &str) {
    let connect = || async {
        Locker::from_arc(
            distlock::connect_backend(url)
                .await
                .unwrap_or_else(|e| panic!("connect: {e}")),
        )
    };
    let (first, second) = (connect().await, connect().await);
    let once = AcquireOptions::with_ttl(Duration::from_secs(30)).wait(Wait::No);
    let held = first.lock_with("smoke", once).await.expect("a grant");
    let busy = second.lock_with("smoke", once).await;
    assert!(
        matches!(busy, Err(lock_core::Error::Busy { .. })),
        "a held lock is busy"
    );
    let wait =
        AcquireOptions::with_ttl(Duration::from_secs(30)).wait(Wait::For(Duration::from_secs(20)));
    let waiter = tokio::spawn(async move { second.lock_with("smoke", wait).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let token = held.token();
    let released = Instant::now();
    held.release().await.expect("a release");
    let next = waiter.await.unwrap().expect("the waiter gets the lock");
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "the waiter was woken by the release, not the TTL: {:?}",
        released.elapsed()
    );
    assert!(next.token() > token, "{:?} after {token:?}", next.token());
    next.release().await.expect("a release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_grants_fences_releases_and_wakes_a_waiter() {
    let cluster = RedisCluster::shared_tls().await;
    let url = cluster.url(&format!("prefix={}:", fresh_table()));
    // The URL's TLS options turn TLS on; the scheme that implies it too.
    let url = url.replacen("redis+cluster://", "rediss+cluster://", 1);
    grant_fence_release_wake(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_sentinel_topology_grants_fences_releases_and_wakes_a_waiter() {
    let topology = RedisSentinel::shared_tls().await;
    let url = topology.url(&format!("prefix={}:", fresh_table()));
    let url = url.replacen("redis+sentinel://", "rediss+sentinel://", 1);
    grant_fence_release_wake(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly_by_a_cluster() {
    let cluster = RedisCluster::shared_tls().await;
    let base = cluster.url("");
    let base = base.split_once('?').map_or(base.as_str(), |(b, _)| b);
    let url = |tls: &str| {
        format!(
            "{base}?connect_timeout={}ms&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    let password = cluster.nodes()[0].password();
    refused_clearly("redis", url, 2 * CONNECT_TIMEOUT, Some(password)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly_by_sentinels() {
    let topology = RedisSentinel::shared_tls().await;
    let base = topology.url("");
    let base = base.split_once('?').map_or(base.as_str(), |(b, _)| b);
    let url = |tls: &str| {
        format!(
            "{base}?connect_timeout={}ms&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    let password = topology.data_nodes()[0].password();
    refused_clearly("redis", url, 2 * CONNECT_TIMEOUT, Some(password)).await;
}
