//! Redlock's failure modes on real, independent `redis-server` masters.

use conformance_tests::kinds::Kinds;
use std::time::Duration;

use conformance_tests::proxy::Proxy;
use conformance_tests::servers::redis::{Redis, RedisSet};
use conformance_tests::targets::fresh_table;
use lock_core::{AcquireOptions, Error, Locker, Wait};
use tokio::time::{Instant, sleep, timeout};

async fn locker(url: &str) -> Locker {
    Locker::from_arc(distlock::connect_backend(url).await.expect("connect"))
}

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(Wait::No)
}

/// Lock keys (not fence counters) left under `prefix` on any node.
fn lock_keys(set: &RedisSet, prefix: &str) -> Vec<String> {
    set.nodes
        .iter()
        .flat_map(|n| {
            let keys = n
                .cli(&["--scan", "--pattern", &format!("{prefix}*")])
                .unwrap_or_default();
            keys.lines()
                .filter(|k| !k.ends_with("#fence"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One master of five is down: the majority still grants and releases.
/// Three are down, then three are frozen: the acquire fails within its
/// budget, says how many answered, and leaves no lock behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_is_needed_and_enough() {
    let set = RedisSet::start(5).await;
    let prefix = format!("{}:", fresh_table());
    let l = locker(&set.url(&format!("prefix={prefix}&timeout=100ms"))).await;
    let ttl = Duration::from_secs(5);

    set.nodes[0].process().stop();
    let g = l
        .lock_with("quorum", opts(ttl))
        .await
        .expect("4 of 5 is a majority");
    g.release().await.expect("release on the majority");

    set.nodes[1].process().stop();
    set.nodes[2].process().stop();
    let started = Instant::now();
    match l.lock_with("quorum", opts(ttl)).await {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("only 2 of 5 nodes answered"), "{message}")
        }
        other => panic!("expected Unavailable with 3 of 5 down, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "within the budget: {:?}",
        started.elapsed()
    );
    for n in &set.nodes[..3] {
        n.process().restart();
        n.wait_ready().await;
    }

    for n in &set.nodes[..3] {
        n.process().pause();
    }
    let started = Instant::now();
    let outcome = l.lock_with("frozen", opts(ttl)).await;
    let took = started.elapsed();
    for n in &set.nodes[..3] {
        n.process().resume();
    }
    match outcome {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("only 2 of 5"), "{message}")
        }
        other => panic!("expected Unavailable with 3 of 5 frozen, got {other:?}"),
    }
    assert!(took < Duration::from_secs(3), "within the budget: {took:?}");
    // The frozen nodes run the queued acquire when they thaw, then the
    // release queued behind it on the same connection.
    sleep(Duration::from_millis(500)).await;
    assert_eq!(
        lock_keys(&set, &prefix),
        Vec::<String>::new(),
        "no partial lock left behind"
    );
}

/// A master that restarts without persistence forgets the locks it held.
/// Restarted at once, it lets a second client build a majority while the
/// first lease is still valid; kept down longer than the TTL (the "delayed
/// restart" rule), it does not. Counts double grants both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_restart_prevents_double_grants() {
    const TRIALS: usize = 2;
    let set = RedisSet::start(5).await;
    let ttl = Duration::from_secs(2);
    let mut double = [0usize; 2];
    for (mode, delayed) in [(0, false), (1, true)] {
        for _ in 0..TRIALS {
            let prefix = format!("{}:", fresh_table());
            let url = set.url(&format!("prefix={prefix}&timeout=50ms"));
            let a = locker(&url).await;
            // The first grant lands on exactly nodes 0, 1 and 2: 3 and 4 are
            // down (frozen nodes would apply the queued request on thawing).
            set.nodes[3].process().stop();
            set.nodes[4].process().stop();
            let first = a
                .lease_kind("restart", lock_core::LockKind::Exclusive, opts(ttl))
                .await
                .expect("3 of 5");
            for n in &set.nodes[3..] {
                n.process().restart();
                n.wait_ready().await;
            }
            // Node 0 crashes and forgets the lock.
            set.nodes[0].process().kill();
            if !delayed {
                set.nodes[0].process().restart();
                set.nodes[0].wait_ready().await;
            }
            // Another client, arriving now.
            let b = locker(&url).await;
            while !first.is_expired() {
                if let Ok(second) = b.try_lock("restart").await {
                    if !first.is_expired() {
                        double[mode] += 1;
                    }
                    second.release().await.ok();
                    break;
                }
                sleep(Duration::from_millis(20)).await;
            }
            if delayed {
                // Down for longer than the TTL: every lock it held is gone
                // from the other nodes too before it comes back.
                sleep(ttl).await;
                set.nodes[0].process().restart();
                set.nodes[0].wait_ready().await;
            }
        }
    }
    println!(
        "redlock restart without persistence, {TRIALS} trials each: double grants with immediate restart {}, with delayed restart {}",
        double[0], double[1]
    );
    assert_eq!(
        double[0], TRIALS,
        "an immediate restart lets a second holder in (the failure reproduced)"
    );
    assert_eq!(double[1], 0, "a delayed restart does not");
}

/// Martin Kleppmann's clock jump, by its effect: one master's clock leaps
/// forward and the held key expires there early (`PEXPIRE key 1` on that
/// master alone; Debian's `redis-server` cannot run under libfaketime). A
/// holder on all five masters keeps a majority; a holder on exactly three
/// is left with two, and a second client takes the lock while the first
/// lease is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_expiry_on_one_master_breaks_a_bare_majority() {
    let set = RedisSet::start(5).await;
    let ttl = Duration::from_secs(5);
    let prefix = format!("{}:", fresh_table());
    let url = set.url(&format!("prefix={prefix}&timeout=50ms"));
    let a = locker(&url).await;
    let b = locker(&url).await;

    let first = a
        .lease_kind("all", lock_core::LockKind::Exclusive, opts(ttl))
        .await
        .expect("5 of 5");
    set.nodes[0].cli(&["PEXPIRE", &format!("{prefix}all"), "1"]);
    assert!(
        b.try_lock("all").await.is_err_and(|e| e.is_busy()),
        "four of five masters still have the lock"
    );
    assert!(!first.is_expired());

    // The first grant lands on exactly nodes 0, 1 and 2.
    set.nodes[3].process().stop();
    set.nodes[4].process().stop();
    let first = a
        .lease_kind("bare", lock_core::LockKind::Exclusive, opts(ttl))
        .await
        .expect("3 of 5");
    for n in &set.nodes[3..] {
        n.process().restart();
        n.wait_ready().await;
    }
    set.nodes[0].cli(&["PEXPIRE", &format!("{prefix}bare"), "1"]);
    let mut double = false;
    while !first.is_expired() {
        // b reconnects to nodes 3 and 4 by itself.
        if let Ok(second) = b.try_lock("bare").await {
            double = !first.is_expired();
            second.release().await.ok();
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    assert!(
        double,
        "one early expiry under a bare majority lets a second holder in (the failure reproduced)"
    );
}

/// A master that may evict lock keys is left out like a master that is
/// down, unless the URL accepts eviction: with it, a majority of three is
/// still there, and the lock key never lands on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_may_evict_lock_keys_is_left_out() {
    let mut set = RedisSet::start(2).await;
    set.nodes.push(
        Redis::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"]).await,
    );
    for (query, on_evicting) in [("", "0"), ("&allow_eviction=true", "1")] {
        let prefix = format!("{}:", fresh_table());
        let l = locker(&set.url(&format!("prefix={prefix}{query}"))).await;
        let g = l
            .lock_with("evict", opts(Duration::from_secs(10)))
            .await
            .expect("a majority without the evicting master");
        let key = format!("{prefix}evict");
        for (i, node) in set.nodes.iter().enumerate() {
            let expected = if i == 2 { on_evicting } else { "1" };
            assert_eq!(
                node.cli(&["EXISTS", &key]).expect("redis-cli").trim(),
                expected,
                "node {i}, options \"{query}\""
            );
        }
        g.release().await.expect("release");
    }
}

/// A master whose connections take longer than a call may (a TLS
/// handshake, a slow link) but less than `connect_timeout` is connected in
/// the background and then counts toward the majority. It is unreachable
/// when the backend starts; once it can be reached, slowly, the only
/// majority left needs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_slow_to_connect_joins_the_majority() {
    let set = RedisSet::start(3).await;
    let proxy = Proxy::start(set.nodes[2].port()).await;
    proxy.set_connect_delay(Duration::from_secs(60));
    let hosts = [
        set.nodes[0].redlock_host(),
        set.nodes[1].redlock_host(),
        set.nodes[2].redlock_host_via(proxy.port()),
    ];
    let url = format!(
        "redlock://{}?prefix={}:&timeout=100ms&connect_timeout=2s",
        hosts.join(","),
        fresh_table()
    );
    let l = locker(&url).await;
    proxy.set_connect_delay(Duration::from_millis(500));
    set.nodes[1].process().stop();
    let g = timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(g) = l.try_lock("slow").await {
                return g;
            }
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the slow master joins node 0 in a majority");
    g.release().await.expect("release");
}

/// A grant's token is the masters' clock at the grant, so it keeps growing
/// across restarts that lose every key; since it is stored nowhere, the
/// holder is reported without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_outlive_a_restart_of_every_master() {
    let set = RedisSet::start(3).await;
    let prefix = format!("{}:", fresh_table());
    let l = locker(&set.url(&format!("prefix={prefix}"))).await;
    let ttl = Duration::from_secs(5);
    let first = l.lock_with("clock", opts(ttl)).await.expect("free");
    let holder = l.holder("clock").await.expect("holder").expect("held");
    assert_eq!(holder.owner, first.lease().owner().short());
    assert_eq!(holder.token, None, "Redlock cannot read a token back");
    assert!(holder.expires_in.is_some_and(|left| left <= ttl));
    let before = first.token();
    first.release().await.expect("release");
    for n in &set.nodes {
        n.process().kill();
        n.process().restart();
        n.wait_ready().await;
    }
    let next = timeout(Duration::from_secs(20), async {
        loop {
            match l.lock_with("clock", opts(ttl)).await {
                Ok(guard) => break guard,
                Err(e) if e.is_retryable() => sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("after the restarts: {e}"),
            }
        }
    })
    .await
    .expect("the masters come back");
    assert!(
        next.token() > before,
        "{} after the restarts, {before} before",
        next.token()
    );
    next.release().await.expect("release");
}

/// A read-write lock on Redlock: each master keeps the group (readers and
/// writers in sorted sets); a side is held where a majority admits it. A
/// writer written by hand on one master of three does not keep readers out
/// (the other two admit them); on two it does. A semaphore is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_needs_a_majority_and_a_semaphore_is_refused() {
    let set = RedisSet::start(3).await;
    let prefix = format!("{}:", fresh_table());
    let l = locker(&set.url(&format!("prefix={prefix}"))).await;
    let ttl = Duration::from_secs(10);
    let (read, write) = (opts(ttl), opts(ttl));
    let doc = l.rwlock("doc");

    let r1 = doc.read_with(read).await.expect("a free read lock");
    let r2 = doc.read_with(read).await.expect("readers share");
    assert!(matches!(
        doc.write_with(write).await,
        Err(Error::Busy { .. })
    ));
    r1.release().await.expect("release");
    r2.release().await.expect("release");

    let writers = format!("{prefix}doc#rw#writers");
    let far = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000)
        .to_string();
    let hand_written = |n: usize| {
        set.nodes[n]
            .cli(&["ZADD", &writers, &far, "another-client"])
            .expect("ZADD on one master")
    };
    hand_written(0);
    let r = l
        .rwlock("doc")
        .read_with(read)
        .await
        .expect("a writer on one master of three does not keep a reader out");
    r.release().await.expect("release");
    hand_written(1);
    assert!(
        matches!(doc.read_with(read).await, Err(Error::Busy { .. })),
        "a writer on two masters of three keeps readers out"
    );

    match l
        .lock_kind("jobs", lock_core::LockKind::permit(2), opts(ttl))
        .await
    {
        Err(Error::Unsupported { operation, .. }) => assert_eq!(operation, "semaphores"),
        other => panic!("a Redlock semaphore: expected Unsupported, got {other:?}"),
    }
}
