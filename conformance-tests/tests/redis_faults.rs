//! Redis servers each test starts for itself, because it stops, freezes,
//! replicates or configures them: restarts without persistence, a hung
//! server, replication with `WAIT`, servers that evict keys. They start
//! their own even when `DISTLOCK_TEST_REDIS_URL` is set.

mod common {
    pub(crate) mod redis;
}

use conformance_tests::kinds::Kinds;
use conformance_tests::kinds::busy_is_none;
use std::future::{Future, poll_fn};
use std::task::Poll;
use std::time::Duration;

use common::redis::{locker, opts, prefix};
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::redis::Redis;
use distlock::backends::redis::RedisBackend;
use lock_core::backend::{AcquireRequest, LockBackend};
use lock_core::{Error, Fencing, LockKind, LockName, LockState, StateWatch, Wait};
use tokio::time::{Instant, sleep, timeout};

/// A restart with no persistence loses every key, fence counters included;
/// tokens still go up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_survives_a_restart_without_persistence() {
    let server = Redis::start().await;
    let prefix = prefix();
    let url = server.url(&format!("prefix={prefix}"));
    let before = {
        let l = locker(&url).await;
        let g = l.try_lock("fence").await.expect("free");
        let token = g.token();
        g.release().await.expect("release");
        token
    };
    server.process().stop();
    server.process().restart();
    server.wait_ready().await;
    let fence_key = format!("{prefix}fence#fence");
    assert_eq!(
        server
            .cli(&["EXISTS", &fence_key])
            .expect("redis-cli")
            .trim(),
        "0",
        "the counter is gone"
    );
    let l = locker(&url).await;
    let g = l.try_lock("fence").await.expect("free");
    assert!(
        g.token() > before,
        "{:?} after {before:?} across a restart",
        g.token()
    );
    g.release().await.expect("release");
}

/// `kill -9` of a server with `appendonly yes` and `appendfsync always`,
/// and a restart: every grant it acknowledged is still there. Each grant's
/// script writes several keys, which the append-only file keeps as one
/// transaction; Redis 7.0 replays those as the default user and drops them
/// if that user lacks permission (redis/redis#14541), which the harness's
/// servers once did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_the_append_only_file_keeps_every_grant() {
    let server = Redis::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).await;
    let url = server.url(&format!("prefix={}", prefix()));
    let holder = locker(&url).await;
    let kept = [
        busy_is_none(holder.try_lock("mutex").await),
        busy_is_none(holder.semaphore("permit", 1).try_acquire().await),
        busy_is_none(holder.rwlock("read").try_read().await),
    ]
    .map(|got| got.expect("acquire").expect("free"));
    server.process().kill();
    server.process().restart();
    server.wait_ready().await;
    let other = locker(&url).await;
    let taken = [
        ("the mutex", busy_is_none(other.try_lock("mutex").await)),
        (
            "the permit",
            busy_is_none(other.semaphore("permit", 1).try_acquire().await),
        ),
        (
            "the reader's lock",
            busy_is_none(other.rwlock("read").try_write().await),
        ),
    ];
    for (what, got) in taken {
        assert!(
            got.expect("try after the restart").is_none(),
            "{what} was granted again after the restart: the server lost the grant"
        );
    }
    for guard in kept {
        // The holder's connection died with the server; a release that
        // finds it broken reports so, and the grant runs out anyway.
        let _ = guard.release().await;
    }
}

/// A server frozen with SIGSTOP: calls fail within the timeout instead of
/// hanging, the holder's guard goes at risk, and recovers when it thaws.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_gives_timeouts_not_hangs() {
    let server = Redis::start().await;
    let url = server.url(&format!("prefix={}&timeout=300ms", prefix()));
    let (a, b) = (locker(&url).await, locker(&url).await);
    let guard = a
        .lock_with("hung", opts(Duration::from_secs(4), Wait::No))
        .await
        .expect("free");
    let mut states = guard.handle().watch();
    server.process().pause();
    let started = Instant::now();
    let outcome = busy_is_none(b.try_lock("hung").await);
    let took = started.elapsed();
    server.process().resume();
    match outcome {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(got) => panic!("a frozen server granted a lock: {got:?}"),
    }
    assert!(
        took < Duration::from_secs(5),
        "an answer within the timeout, took {took:?}"
    );
    server.process().pause();
    timeout(Duration::from_secs(10), async {
        while states.state() != LockState::AtRisk {
            states.changed().await.expect("guard alive");
        }
    })
    .await
    .expect("renewal against a frozen server puts the lock at risk");
    server.process().resume();
    timeout(Duration::from_secs(10), async {
        while states.state() == LockState::AtRisk {
            states.changed().await.expect("guard alive");
        }
    })
    .await
    .expect("renewal resumes");
    assert_eq!(
        guard.state(),
        LockState::Held,
        "thawed before the lease ran out"
    );
    guard.release().await.expect("release");
}

/// `wait_replicas`: a grant counts only once a replica confirms it; with the
/// replica frozen the acquire fails, says why, and gives the lock back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_confirms_or_fails_the_grant() {
    let primary = Redis::start().await;
    let replica = Redis::replica_of(&primary).await;
    let prefix = prefix();
    let strict = locker(&primary.url(&format!(
        "prefix={prefix}&wait_replicas=1&wait_timeout=500ms"
    )))
    .await;
    let plain = locker(&primary.url(&format!("prefix={prefix}"))).await;
    // The replica may still be syncing; the first grant waits for it.
    let g = timeout(Duration::from_secs(20), async {
        loop {
            match busy_is_none(strict.try_lock("replicated").await) {
                Ok(Some(g)) => return g,
                _ => sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await
    .expect("a replica confirms a grant");
    let key = format!("{prefix}replicated");
    assert_eq!(
        replica.cli(&["GET", &key]).expect("redis-cli").trim(),
        g.lease().owner().to_hex(),
        "the replica has the lock"
    );
    g.release().await.expect("release");
    // A server that forgot the script (a restart): loaded again, and the
    // grant still confirmed.
    assert_eq!(
        primary.cli(&["SCRIPT", "FLUSH"]).expect("redis-cli").trim(),
        "OK"
    );
    strict
        .try_lock("replicated")
        .await
        .expect("free")
        .release()
        .await
        .expect("release");

    replica.process().pause();
    let outcome = busy_is_none(strict.try_lock("replicated").await);
    replica.process().resume();
    match outcome {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("replicas"), "{message}")
        }
        other => panic!("expected Unavailable naming the replicas, got {other:?}"),
    }
    let free = busy_is_none(plain.try_lock("replicated").await).expect("try_lock");
    free.expect("an unconfirmed grant was given back")
        .release()
        .await
        .expect("release");
}

/// `wait_replicas` holds renewals to what the replicas have, as it holds
/// grants. With the replica frozen, `extend` fails and leaves the lease as
/// it was, and the keep-alive of every kind of lock goes at risk, then
/// lost at the deadline of the last renewal the replica confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_confirms_renewals_or_lets_the_lease_run_out() {
    let primary = Redis::start().await;
    let replica = Redis::replica_of(&primary).await;
    let url = primary.url(&format!(
        "prefix={}&wait_replicas=1&wait_timeout=200ms",
        prefix()
    ));
    let l = locker(&url).await;
    let ttl = Duration::from_secs(3);
    let kinds = [
        ("mutex", LockKind::Exclusive),
        ("permits", LockKind::permit(2)),
        ("readers", LockKind::Read),
        ("writer", LockKind::Write),
    ];
    let mut guards = Vec::new();
    for (name, kind) in kinds {
        // The replica may still be syncing; the first grant waits for it.
        let guard = timeout(Duration::from_secs(20), async {
            loop {
                match l.lock_kind(name, kind, opts(ttl, Wait::No)).await {
                    Ok(guard) => return guard,
                    Err(_) => sleep(Duration::from_millis(200)).await,
                }
            }
        })
        .await
        .expect("a replica confirms a grant");
        guards.push(guard);
    }
    for guard in &mut guards {
        guard
            .extend(ttl)
            .await
            .expect("an extend the replica confirms");
    }
    replica.process().pause();
    let paused = Instant::now();
    let watching: Vec<_> = guards
        .iter()
        .map(|g| tokio::spawn(states_until_lost(g.handle().watch())))
        .collect();
    for guard in &mut guards {
        let before = guard.lease();
        match guard.extend(ttl * 2).await {
            Err(Error::Unavailable { message, .. }) => {
                assert!(message.contains("renewal"), "{message}");
                assert!(message.contains("replicas"), "{message}");
            }
            other => panic!("{}: an extend no replica has: {other:?}", guard.name()),
        }
        assert_eq!(
            guard.lease().deadline(),
            before.deadline(),
            "{}",
            guard.name()
        );
    }
    for (guard, watch) in guards.iter().zip(watching) {
        let seen = timeout(ttl * 2, watch)
            .await
            .unwrap_or_else(|_| panic!("{}: not lost, now {:?}", guard.name(), guard.state()))
            .expect("watcher");
        // Held when the replica froze; the watcher may start late.
        assert!(
            seen.ends_with(&[LockState::AtRisk, LockState::Lost]),
            "{}: {seen:?}",
            guard.name()
        );
        assert!(
            guard.lease().sent_at() < paused && guard.lease().is_expired(),
            "{}: renewed while no replica could confirm",
            guard.name()
        );
    }
    replica.process().resume();
}

/// The states a guard goes through, from now until `Lost`.
async fn states_until_lost(mut states: StateWatch) -> Vec<LockState> {
    let mut seen = vec![states.state()];
    while let Some(state) = states.changed().await {
        seen.push(state);
    }
    seen
}

/// A connection lost between the grant and `WAIT` is not a confirmation.
/// The replica is frozen, so a `WAIT` after the grant's write can only
/// time out with 0; the proxy delivers the acquire script's reply and cuts
/// the connection, and another call of the same client meets the cut
/// first and reconnects. A `WAIT` sent on its own would now run on the new
/// connection, which wrote nothing, and count the frozen replica.
///
/// The client logs in as the default user without a password: Redis 7.0
/// stamps a connection's write offset after every command, `AUTH`
/// included, so a `WAIT` right after an `AUTH` would wait for the server's
/// latest write whoever made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_between_grant_and_wait_confirms_nothing() {
    let primary = Redis::start().await;
    let default_user = [
        "ACL", "SETUSER", "default", "on", "nopass", "~*", "&*", "+@all",
    ];
    assert_eq!(primary.cli(&default_user).expect("redis-cli").trim(), "OK");
    let replica = Redis::replica_of(&primary).await;
    let proxy = Proxy::start(primary.port()).await;
    let prefix = prefix();
    let url = format!(
        "redis://127.0.0.1:{}?prefix={prefix}&wait_replicas=1&wait_timeout=300ms",
        proxy.port()
    );
    let backend = RedisBackend::connect(&url).await.expect("connect");
    let ttl = Duration::from_secs(10);
    let name = LockName::new("cut").expect("name");
    // A first confirmed grant: the replica is in sync and the script loaded.
    timeout(Duration::from_secs(20), async {
        loop {
            let req = AcquireRequest::new(name.clone(), ttl);
            if let Ok(Some(lease)) = backend.try_acquire(&req).await {
                backend.release(&lease).await.expect("release");
                return;
            }
            sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("a replica confirms a grant");

    replica.process().pause();
    proxy.set(Fault::CutAfterNextReply);
    let req = AcquireRequest::new(name.clone(), ttl);
    // One poll sends the request; the attempt is not polled again until the
    // client has reconnected. On a loaded machine an earlier command may
    // have timed out, leaving a connection that fails at once while it
    // reconnects: such an attempt sent nothing, so try again.
    let mut tries = 0;
    let attempt = loop {
        let mut attempt = Box::pin(backend.try_acquire(&req));
        let first = poll_fn(|cx| Poll::Ready(attempt.as_mut().poll(cx))).await;
        match first {
            Poll::Pending => break attempt,
            Poll::Ready(outcome) => {
                tries += 1;
                assert!(
                    tries < 20 && outcome.is_err(),
                    "answered at once, {tries} times: {outcome:?}"
                );
                sleep(Duration::from_millis(200)).await;
            }
        }
    };
    timeout(Duration::from_secs(10), async {
        while proxy.cuts() == 0 {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the proxy cut the connection after the script's reply");
    let _ = backend.holders(&name, LockKind::Exclusive).await;
    let outcome = timeout(Duration::from_secs(10), attempt)
        .await
        .expect("the attempt ends");
    replica.process().resume();
    match outcome {
        Ok(Some(lease)) => panic!(
            "a grant no replica has was reported confirmed (token {:?})",
            lease.token()
        ),
        Ok(None) => panic!("the lock was free"),
        Err(e) => assert!(e.is_retryable(), "{e}"),
    }
    let plain = RedisBackend::connect(&primary.url(&format!("prefix={prefix}")))
        .await
        .expect("connect");
    let free = plain
        .try_acquire(&AcquireRequest::new(name.clone(), ttl))
        .await
        .expect("try_acquire");
    assert!(free.is_some(), "the unconfirmed grant was given back");
}

async fn evicting(policy: &str) -> Redis {
    Redis::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", policy]).await
}

/// A server that may evict lock keys is refused unless the URL accepts it;
/// with `allkeys-*` the fence counters may go too, so fencing is only best
/// effort. A limit with `noeviction` is fine as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_evict_lock_keys_is_refused_unless_allowed() {
    for (policy, fencing) in [
        ("allkeys-lru", Fencing::BestEffort),
        ("volatile-lru", Fencing::Strict),
    ] {
        let server = evicting(policy).await;
        let err = RedisBackend::connect(&server.url(""))
            .await
            .expect_err("a server that may evict lock keys");
        let message = err.to_string();
        assert!(
            message.contains(&format!("maxmemory-policy {policy}"))
                && message.contains("allow_eviction=true"),
            "{message}"
        );
        assert!(!err.is_retryable(), "{err}");
        let allowed = RedisBackend::connect(&server.url("allow_eviction=true"))
            .await
            .expect("allowed by the URL");
        assert_eq!(allowed.capabilities().fencing, fencing, "{policy}");
    }
    let strict = evicting("noeviction").await;
    let backend = RedisBackend::connect(&strict.url(""))
        .await
        .expect("maxmemory with noeviction");
    assert_eq!(backend.capabilities().fencing, Fencing::Strict);
}

/// The policy is read with `INFO`, or with `CONFIG GET` from a user who may
/// not run `INFO`; a user who may run neither connects, the policy unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eviction_policy_is_read_with_info_or_config() {
    let server = evicting("allkeys-lfu").await;
    for (user, denied, refused) in [
        ("no-config", "-config", true),
        ("no-info", "-info", true),
        ("neither", "-info -config", false),
    ] {
        let mut acl = vec!["ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"];
        acl.extend(denied.split(' '));
        assert_eq!(server.cli(&acl).expect("redis-cli").trim(), "OK");
        let url = format!("redis://{user}:pw@127.0.0.1:{}", server.port());
        let outcome = RedisBackend::connect(&url).await;
        match (outcome, refused) {
            (Err(e), true) => assert!(e.to_string().contains("allkeys-lfu"), "{user}: {e}"),
            (Ok(_), false) => {}
            (outcome, _) => panic!("{user}: {outcome:?}"),
        }
    }
}
