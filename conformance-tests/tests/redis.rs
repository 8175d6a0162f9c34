//! Redis beyond the conformance suite, on the shared server (the one
//! `DISTLOCK_TEST_REDIS_URL` names, if set): plain `SET NX PX` clients, a
//! fence counter rolled back, pub/sub wake-ups, secrets, the group's keys,
//! and (on a server of its own, whose counters it resets) the commands a
//! permit runs on the server. Tests that stop, freeze, replicate or
//! configure a server are in `redis_faults.rs`.

mod common {
    pub(crate) mod redis;
}

use conformance_tests::kinds::Kinds;
use std::sync::Arc;
use std::time::Duration;

use common::redis::{locker, opts, prefix};
use conformance_tests::servers::redis::Redis;
use distlock::backends::redis::RedisBackend;
use lock_core::backend::LockBackend;
use lock_core::{FencingToken, Locker, Wait};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep};

/// A plain client of the server, as another application has: no distlock.
async fn plain(server: &Redis) -> MultiplexedConnection {
    redis::Client::open(server.url(""))
        .expect("a redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect a plain client")
}

/// `SET key value NX PX ms` from a plain client: whether it was set.
async fn set_nx_px(client: &mut MultiplexedConnection, key: &str, value: &str, ms: u64) -> bool {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(ms)
        .query_async::<Option<String>>(client)
        .await
        .expect("SET NX PX")
        .is_some()
}

/// A plain client's `SET key x NX PX` on the lock's key is refused while
/// distlock holds it, succeeds after release, and distlock then waits for
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_set_nx_px_clients_exclude_each_other() {
    let server = Redis::shared().await;
    let prefix = prefix();
    let key = format!("{prefix}interop");
    let l = locker(&server.url(&format!("prefix={prefix}"))).await;
    let mut other = plain(server).await;
    let guard = l
        .lock_with("interop", opts(Duration::from_secs(10), Wait::No))
        .await
        .expect("free");
    assert!(
        !set_nx_px(&mut other, &key, "x", 10_000).await,
        "SET NX succeeded while distlock held the lock"
    );
    guard.release().await.expect("release");
    assert!(
        set_nx_px(&mut other, &key, "x", 1500).await,
        "SET NX after distlock released"
    );
    assert!(
        l.try_lock("interop").await.is_err_and(|e| e.is_busy()),
        "distlock sees the plain lock"
    );
    let waited = l
        .lock_with(
            "interop",
            opts(Duration::from_secs(10), Wait::For(Duration::from_secs(20))),
        )
        .await
        .expect("granted once the plain lock expired");
    let value: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut other)
        .await
        .expect("GET");
    assert_eq!(
        value.as_deref(),
        Some(waited.lease().owner().to_hex().as_str()),
        "the key holds just the owner token"
    );
    waited.release().await.expect("release");
}

/// A counter that went back (a restart from an older snapshot, a failover to
/// a replica that missed the last grants) but did not vanish: tokens still
/// go up, because the clock bounds them from below, not only the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_survives_a_counter_rolled_back() {
    let server = Redis::shared().await;
    let prefix = prefix();
    let url = server.url(&format!("prefix={prefix}"));
    let l = locker(&url).await;
    let mut last = FencingToken::new(0);
    for _ in 0..3 {
        let g = l.try_lock("rolled").await.expect("free");
        assert!(g.token() > last, "{:?} after {last:?}", g.token());
        last = g.token();
        g.release().await.expect("release");
    }
    // A real rollback (a restart, a failover) takes more than the
    // millisecond the clock floor counts in; done within the same
    // millisecond as the last grant, the floor would equal that grant's
    // token, which is what the rule leaves out. Let the clock move first.
    sleep(Duration::from_millis(3)).await;
    let rolled_back = (last.get() / 2).to_string();
    let () = redis::cmd("SET")
        .arg(format!("{prefix}rolled#fence"))
        .arg(&rolled_back)
        .query_async(&mut plain(server).await)
        .await
        .expect("SET the counter");
    let g = l.try_lock("rolled").await.expect("free");
    assert!(
        g.token() > last,
        "{:?} after {last:?} with the counter rolled back to {rolled_back}",
        g.token()
    );
    g.release().await.expect("release");
}

/// A release is announced on pub/sub and wakes a waiter in another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_waiters_through_pub_sub() {
    let server = Redis::shared().await;
    let url = server.url(&format!("prefix={}", prefix()));
    let holder = Locker::from_arc(Arc::new(
        RedisBackend::connect(&url).await.expect("connect"),
    ));
    let waiting_side = Arc::new(RedisBackend::connect(&url).await.expect("connect"));
    let waiter = Locker::from_arc(waiting_side.clone() as Arc<dyn LockBackend>);
    let guard = holder
        .lock_with("wake", opts(Duration::from_secs(10), Wait::No))
        .await
        .expect("free");
    let wait = tokio::spawn(async move {
        waiter
            .lock_with(
                "wake",
                opts(Duration::from_secs(10), Wait::For(Duration::from_secs(20))),
            )
            .await
    });
    // Let the waiter's first attempt fail and its subscription settle.
    sleep(Duration::from_millis(300)).await;
    guard.release().await.expect("release");
    let granted = wait
        .await
        .expect("waiter task")
        .expect("the waiter got the lock");
    assert!(
        waiting_side.stats().wakeups >= 1,
        "the release notice reached the other client"
    );
    granted.release().await.expect("release");
}

/// Nothing listens, or the password is wrong: a prompt error without the
/// password; and `Debug` never shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_debug_never_show_the_password() {
    let server = Redis::shared().await;
    let closed = conformance_tests::servers::ports::unused_port();
    let url = format!(
        "redis://distlock:{}@127.0.0.1:{closed}?connect_timeout=1s",
        Redis::PASSWORD
    );
    let started = Instant::now();
    let err = RedisBackend::connect(&url)
        .await
        .expect_err("nothing listens");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(err.is_retryable(), "{err}");
    assert!(!format!("{err} {err:?}").contains(Redis::PASSWORD));
    let wrong = server
        .url("")
        .replace(server.password(), "not-the-password");
    let err = RedisBackend::connect(&wrong)
        .await
        .expect_err("wrong password");
    assert!(
        !format!("{err} {err:?}").contains("not-the-password"),
        "{err:?}"
    );
    assert!(
        !err.is_retryable(),
        "the same password is refused again: {err:?}"
    );
    let backend = RedisBackend::connect(&server.url(""))
        .await
        .expect("connect");
    assert!(!format!("{backend:?}").contains(server.password()));
}

/// A semaphore's permits and a read-write lock's sides are sorted sets a
/// plain client can read: one member per holder (its owner token), scored
/// by its expiry on the server's clock, beside a hash of their tokens; a
/// writer refused by a reader waits in its own set, and a member written
/// by hand with a far expiry counts as a holder, as a crashed client's
/// would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_read_write_locks_are_sorted_sets_of_holders() {
    let server = Redis::shared().await;
    let prefix = prefix();
    let l = locker(&server.url(&format!("prefix={prefix}"))).await;
    let mut plain = plain(server).await;
    let counter = plain.clone();
    let zcard = |key: String| {
        let mut c = counter.clone();
        async move {
            redis::cmd("ZCARD")
                .arg(key)
                .query_async::<u64>(&mut c)
                .await
                .expect("ZCARD")
        }
    };
    let a = l.semaphore("jobs", 2).acquire().await.expect("a permit");
    let b = l.semaphore("jobs", 2).acquire().await.expect("a permit");
    let permits = format!("{prefix}jobs#sem");
    assert_eq!(zcard(permits.clone()).await, 2);
    let token: String = redis::cmd("HGET")
        .arg(format!("{permits}#tokens"))
        .arg(a.lease().owner().to_hex())
        .query_async(&mut plain)
        .await
        .expect("HGET");
    assert_eq!(token, a.token().get().to_string());
    let score: f64 = redis::cmd("ZSCORE")
        .arg(&permits)
        .arg(b.lease().owner().to_hex())
        .query_async(&mut plain)
        .await
        .expect("ZSCORE");
    let (secs, _): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut plain)
        .await
        .expect("TIME");
    let left = score - (secs * 1000) as f64;
    assert!(left > 20_000.0 && left <= 31_000.0, "expiry {left} ms away");
    a.release().await.expect("release");
    assert_eq!(
        zcard(permits.clone()).await,
        1,
        "a release removes its member"
    );
    // A holder that another client wrote (or that crashed) holds a permit
    // until its score passes.
    let far = (secs + 60) * 1000;
    let _: () = redis::cmd("ZADD")
        .arg(&permits)
        .arg(far)
        .arg("crashed-client")
        .query_async(&mut plain)
        .await
        .expect("ZADD");
    assert!(
        l.semaphore("jobs", 2)
            .try_acquire()
            .await
            .is_err_and(|e| e.is_busy()),
        "a member written by hand holds a permit"
    );
    let _: () = redis::cmd("ZREM")
        .arg(&permits)
        .arg("crashed-client")
        .query_async(&mut plain)
        .await
        .expect("ZREM");
    let c = l
        .semaphore("jobs", 2)
        .try_acquire()
        .await
        .expect("free again");
    b.release().await.expect("release");
    c.release().await.expect("release");

    let rw = format!("{prefix}doc#rw");
    let reader = l.rwlock("doc").read().await.expect("read");
    assert_eq!(zcard(rw.clone()).await, 1, "readers");
    let other = locker(&server.url(&format!("prefix={prefix}"))).await;
    let writer = tokio::spawn(async move {
        other
            .lock_kind(
                "doc",
                lock_core::LockKind::Write,
                opts(Duration::from_secs(10), Wait::For(Duration::from_secs(30))),
            )
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while zcard(format!("{rw}#writers-waiting")).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the writer never marked itself waiting"
        );
        sleep(Duration::from_millis(20)).await;
    }
    reader.release().await.expect("release");
    let w = writer.await.expect("task").expect("the writer gets in");
    assert_eq!(zcard(format!("{rw}#writers")).await, 1);
    assert_eq!(
        zcard(format!("{rw}#writers-waiting")).await,
        0,
        "granted, no longer waiting"
    );
    w.release().await.expect("release");
    assert_eq!(zcard(format!("{rw}#writers")).await, 0);
}

/// The commands a permit's uncontended acquire and release run on the
/// server (their scripts' `redis.call`s), as its command counters count
/// them: a semaphore's scripts touch only the holders set, its tokens and
/// counter, and set each key's expiry in one call, so the pair stays well
/// below the two scripts' worst case. Each call is server time on the path
/// of every permit, where the floor's `SET NX` is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permits_acquire_and_release_run_few_commands_on_the_server() {
    let server = Redis::start().await;
    let l = locker(&server.url(&format!("prefix={}", prefix()))).await;
    let mut plain = plain(&server).await;
    // The first pair loads the scripts.
    let warm = l.semaphore("calls", 2).acquire().await.expect("a permit");
    warm.release().await.expect("release");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut plain)
        .await
        .expect("CONFIG RESETSTAT");
    let permit = l.semaphore("calls", 2).acquire().await.expect("a permit");
    permit.release().await.expect("release");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut plain)
        .await
        .expect("INFO commandstats");
    let not_the_scripts = ["eval", "evalsha", "info", "config"];
    let calls: Vec<(&str, u64)> = stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?;
            Some((name, calls.parse().ok()?))
        })
        .filter(|(name, _)| !not_the_scripts.contains(&name.split('|').next().unwrap_or(name)))
        .collect();
    let total: u64 = calls.iter().map(|(_, n)| n).sum();
    assert!(total <= 15, "{total} commands: {calls:?}");
}
