//! Elections on Redis beyond the conformance suite, whose observers poll
//! often enough to pass without a wake-up: here a watch given 60 s is
//! woken by the server's notice of each grant, proclaim and resign (on one
//! server, a cluster and Sentinel), and at a crashed leader's expiry; the
//! election's keys on the server; and Redlock's leader, read back from the
//! majority that granted it.

use std::time::Duration;

use conformance_tests::Target;
use conformance_tests::targets::UrlTarget;
use distlock::backends::redis::RedisBackend;
use distlock::backends::redlock::RedlockBackend;
use lock_core::backend::{LockBackend, acquire_lease};
use lock_core::{AcquireOptions, LockKind, LockName, Locker, Wait};
use tokio::time::{Instant, sleep};

/// What a watch is given: far longer than any wake-up takes.
const WITHIN: Duration = Duration::from_secs(60);

/// A generous bound on a wake-up by the server, far below [`WITHIN`] and
/// the leader's lease (a watch ends at the lease's expiry at the latest).
const WOKEN: Duration = Duration::from_secs(15);

/// The leader's lease in the watched elections.
const LEASE: Duration = Duration::from_secs(60);

fn ten_seconds() -> AcquireOptions {
    AcquireOptions::with_ttl(Duration::from_secs(10)).wait(Wait::No)
}

fn fresh(stem: &str) -> LockName {
    LockName::new(format!("{stem}-{:016x}", rand::random::<u64>())).expect("a valid name")
}

/// Runs `change` while `watcher` waits for the leader of `name` to change
/// from what it reads now, and checks that the wait ends well before
/// [`WITHIN`]; returns what `change` did.
async fn woken_by<T: Send + 'static>(
    watcher: &RedisBackend,
    name: &LockName,
    what: &str,
    change: impl Future<Output = T> + Send + 'static,
) -> T {
    let seen = watcher.leader(name).await.expect("read the leader");
    let changing = tokio::spawn(async move {
        // After the watch has started listening.
        sleep(Duration::from_millis(200)).await;
        change.await
    });
    let started = Instant::now();
    watcher
        .leader_changed(name, seen.as_ref(), WITHIN)
        .await
        .expect("watch");
    let took = started.elapsed();
    assert!(took < WOKEN, "{what}: the watch ended after {took:?}");
    changing.await.expect("the change")
}

async fn observers_are_woken_by_the_server(url: &str) {
    let watcher = RedisBackend::connect(url).await.expect("connect");
    let candidate = Locker::new(RedisBackend::connect(url).await.expect("connect"));
    let name = fresh("woken");
    let election = candidate.election(name.as_str());
    let leading = woken_by(&watcher, &name, "a grant", async move {
        let opts = AcquireOptions::with_ttl(LEASE).wait(Wait::No);
        election.campaign_with("v1", opts).await
    })
    .await
    .expect("a vacant election");
    let lease = leading.lease();
    let proclaimer = RedisBackend::connect(url).await.expect("connect");
    woken_by(&watcher, &name, "a proclaim", async move {
        proclaimer.proclaim(&lease, "v2").await.expect("proclaim");
    })
    .await;
    let now = watcher
        .leader(&name)
        .await
        .expect("read")
        .expect("a leader");
    assert_eq!((now.value.as_str(), now.term), ("v2", leading.term()));
    woken_by(&watcher, &name, "a resign", async move {
        leading.resign().await.expect("resign");
    })
    .await;
    assert_eq!(watcher.leader(&name).await.expect("read"), None);
    // A leader that stops renewing announces nothing: the watch ends at
    // its expiry.
    let crashed = acquire_lease(
        &candidate,
        name.as_str(),
        LockKind::Leader,
        AcquireOptions::with_ttl(Duration::from_secs(1)).wait(Wait::No),
    )
    .await
    .expect("a vacant election");
    woken_by(&watcher, &name, "an expiry", async {}).await;
    assert_eq!(watcher.leader(&name).await.expect("read"), None);
    drop(crashed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_are_woken_by_the_server_on_every_topology() {
    for target in [
        UrlTarget::redis().await,
        UrlTarget::redis_cluster().await,
        UrlTarget::redis_sentinel().await,
        UrlTarget::redis_sentinel_wait().await,
    ] {
        observers_are_woken_by_the_server(&target.url().expect("a URL")).await;
    }
}

/// The election of a name is a mutex of its own keys, beside the name's
/// mutex: the lock and the value expire together, the fence counter stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_keeps_its_own_keys() {
    let target = UrlTarget::redis().await;
    let url = target.url().expect("a URL");
    let l = Locker::new(RedisBackend::connect(&url).await.expect("connect"));
    let name = fresh("keys");
    let mutex = l
        .lock_with(name.as_str(), ten_seconds())
        .await
        .expect("the mutex");
    let leading = l
        .election(name.as_str())
        .campaign_with("10.0.0.7:8080", ten_seconds())
        .await
        .expect("the election, beside the mutex");
    let (server, query) = url.split_once('?').expect("a prefix");
    let prefix = query.trim_start_matches("prefix=");
    let mut plain = redis::Client::open(server)
        .expect("a redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect a plain client");
    let base = format!("{prefix}{name}#elect");
    let get = |key: String| redis::cmd("GET").arg(key).clone();
    let pttl = |key: String| redis::cmd("PTTL").arg(key).clone();
    let owner: Option<String> = get(base.clone())
        .query_async(&mut plain)
        .await
        .expect("GET");
    assert_eq!(owner, Some(leading.lease().owner().to_hex()));
    let value: Option<String> = get(format!("{base}#value"))
        .query_async(&mut plain)
        .await
        .expect("GET");
    assert_eq!(value.as_deref(), Some("10.0.0.7:8080"));
    let fence: Option<String> = get(format!("{base}#fence"))
        .query_async(&mut plain)
        .await
        .expect("GET");
    assert_eq!(fence, Some(leading.term().get().to_string()));
    let (lock_left, value_left): (i64, i64) = (
        pttl(base.clone())
            .query_async(&mut plain)
            .await
            .expect("PTTL"),
        pttl(format!("{base}#value"))
            .query_async(&mut plain)
            .await
            .expect("PTTL"),
    );
    assert!(
        value_left > 0 && value_left <= lock_left + 5,
        "{lock_left} {value_left}"
    );
    leading.resign().await.expect("resign");
    for gone in [base.clone(), format!("{base}#value")] {
        let exists: bool = redis::cmd("EXISTS")
            .arg(&gone)
            .query_async(&mut plain)
            .await
            .expect("EXISTS");
        assert!(!exists, "{gone} outlived the resign");
    }
    assert!(mutex.is_held().await.expect("ask"), "the mutex is apart");
    mutex.release().await.expect("release");
}

/// Redlock's leader is read back from the majority that granted it, with
/// its term; a proclaim reaches the majority; the next term is greater.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_leader_is_read_from_its_majority() {
    let target = UrlTarget::redlock().await;
    let url = target.url().expect("a URL");
    let candidate = Locker::new(RedlockBackend::connect(&url).await.expect("connect"));
    let reader = RedlockBackend::connect(&url).await.expect("connect");
    let name = fresh("redlock");
    let election = candidate.election(name.as_str());
    let leading = election
        .campaign_with("x", ten_seconds())
        .await
        .expect("lead");
    let seen = reader.leader(&name).await.expect("read").expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("x", leading.term()));
    let holders = reader
        .holders(&name, LockKind::Leader)
        .await
        .expect("holders");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].token, Some(leading.term()));
    leading.proclaim("y").await.expect("proclaim");
    let seen = reader.leader(&name).await.expect("read").expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("y", leading.term()));
    let first = leading.term();
    leading.resign().await.expect("resign");
    assert_eq!(reader.leader(&name).await.expect("read"), None);
    let next = election
        .campaign_with("z", ten_seconds())
        .await
        .expect("lead again");
    assert!(next.term() > first, "{:?} after {first:?}", next.term());
    next.resign().await.expect("resign");
}
