//! distlock on Redis Cluster and Redis Sentinel when a master dies: locks
//! spread over every master of a cluster; after a failover new acquires
//! succeed; what happens to locks held across it is counted (and printed,
//! for lock-redis/README.md); with `WAIT` a grant that did not reach a
//! replica is never kept, nor a renewal (the lease runs out at the last
//! deadline the replica had), and without it the seed material's
//! lock-loss window is reproduced: the promoted replica lacks a holder's
//! key, and a second owner is granted the lock while the first still holds
//! it.
//!
//! Each failover test starts its own topology; the spread test uses the
//! shared cluster.

mod common {
    pub(crate) mod failover;
}

use conformance_tests::kinds::Kinds;
use conformance_tests::kinds::busy_is_none;
use std::time::Duration;

use common::failover::{eventually, granted};
use conformance_tests::servers::redis_cluster::RedisCluster;
use conformance_tests::servers::redis_sentinel::RedisSentinel;
use conformance_tests::targets::fresh_table;
use distlock::{AcquireOptions, Error, LockGuard, LockKind, LockState, Locker, Wait};
use tokio::time::{Instant, sleep};

async fn locker(url: &str) -> Locker {
    distlock::connect(url).await.expect("connect")
}

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(Wait::No)
}

/// Lock names, each on its own slot, spread over the cluster.
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_spreads_locks_over_every_master() {
    let cluster = RedisCluster::shared().await;
    let prefix = format!("{}:", fresh_table());
    let l = locker(&cluster.url(&format!("prefix={prefix}"))).await;
    let mut guards = Vec::new();
    for name in names("spread", 48) {
        guards.push(
            l.lock_with(&name, opts(Duration::from_secs(20)))
                .await
                .expect("free"),
        );
    }
    for master in cluster.masters().await {
        let keys = master
            .cli(&["--scan", "--pattern", &format!("{prefix}*")])
            .unwrap_or_default();
        let locks = keys.lines().filter(|k| !k.contains('#')).count();
        assert!(
            locks > 0,
            "master :{} holds none of 48 locks",
            master.port()
        );
        // Every key of one lock is on the master of its slot.
        for key in keys.lines().filter(|k| !k.contains('#')) {
            assert_eq!(
                RedisCluster::slot_of(key),
                RedisCluster::slot_of(format!("{key}#fence")),
                "{key}"
            );
        }
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_mid_run() {
    let cluster = RedisCluster::start().await;
    let url = cluster.url(&format!("prefix={}:&timeout=500ms", fresh_table()));
    let (a, b) = (locker(&url).await, locker(&url).await);
    // Held across the failover, with a TTL longer than it takes; renewed
    // every 6.7 s, on the promoted replica once it serves.
    let ttl = Duration::from_secs(20);
    let all = names("held", 24);
    let mut held: Vec<(String, LockGuard)> = Vec::new();
    for name in &all {
        held.push((
            name.clone(),
            a.lock_with(name, opts(ttl)).await.expect("free"),
        ));
    }
    let slot = RedisCluster::slot_of(format!("{{{}}}", all[0]));
    let killed_at = Instant::now();
    let killed = cluster.kill_master_of_slot(slot).await;
    let promoted = cluster.wait_for_failover(slot).await;
    let failover = killed_at.elapsed();
    assert_ne!(killed.port(), promoted.port());
    // New locks work on every slot once the failover is over.
    for name in names("after", 12) {
        let guard = eventually("acquire after the failover", async || {
            b.lock_with(&name, opts(Duration::from_secs(5))).await
        })
        .await;
        guard.release().await.expect("release");
    }
    // The held locks on the killed master's slots: kept if their keys had
    // reached the replica, lost (granted to b) if not.
    let on_killed: Vec<&(String, LockGuard)> = {
        let mut on = Vec::new();
        for entry in &held {
            let slot = RedisCluster::slot_of(format!("{{{}}}", entry.0));
            if cluster.master_of_slot(slot).await.port() == promoted.port() {
                on.push(entry);
            }
        }
        on
    };
    let mut lost = 0;
    for (name, _) in &on_killed {
        if eventually("try the held lock", async || {
            busy_is_none(b.try_lock(name).await)
        })
        .await
        .is_some()
        {
            lost += 1;
        }
    }
    // Long enough for every guard to renew since the failover.
    sleep(ttl / 3 + Duration::from_secs(1)).await;
    let at_risk_or_lost = held
        .iter()
        .filter(|(_, guard)| guard.state() != LockState::Held)
        .count();
    eprintln!(
        "redis cluster failover: {failover:?} from the kill to the replica serving; {} of 24 held locks were on the killed master, {lost} of them granted again after the failover; {at_risk_or_lost} guards not Held",
        on_killed.len()
    );
    assert!(!on_killed.is_empty(), "the killed master held some locks");
    // A lock written seconds before the kill reached the replica:
    // replication is asynchronous, but not that slow.
    assert_eq!(lost, 0, "held locks lost in the failover");
    assert_eq!(at_risk_or_lost, 0, "guards that could not renew after it");
    for (_, guard) in held {
        let _ = guard.release().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sentinel_failover_new_acquires_succeed() {
    let sentinel = RedisSentinel::start().await;
    let url = sentinel.url(&format!("prefix={}:&timeout=500ms", fresh_table()));
    let l = locker(&url).await;
    let before = l
        .lock_with("before", opts(Duration::from_secs(30)))
        .await
        .expect("free");
    let killed_at = Instant::now();
    let old = sentinel.kill_master().await;
    sentinel.wait_for_failover(old).await;
    let failover = killed_at.elapsed();
    let after = eventually("acquire after the failover", async || {
        l.lock_with("after", opts(Duration::from_secs(5))).await
    })
    .await;
    assert!(after.token() > before.token(), "tokens still grow");
    after.release().await.expect("release on the new master");
    let kept = eventually("try the held lock", async || {
        busy_is_none(l.try_lock("before").await)
    })
    .await;
    eprintln!(
        "redis sentinel failover: {failover:?}; the lock held across it was {}",
        if kept.is_none() { "kept" } else { "lost" }
    );
    assert!(
        kept.is_none(),
        "a lock written before the kill reached the replica"
    );
    drop(before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_grant_that_missed_the_replica_is_never_granted() {
    let sentinel = RedisSentinel::start().await;
    let url = sentinel.url(&format!(
        "prefix={}:&wait_replicas=1&wait_timeout=300ms",
        fresh_table()
    ));
    let l = locker(&url).await;
    l.lock_with("replicated", opts(Duration::from_secs(5)))
        .await
        .expect("granted while the replica keeps up")
        .release()
        .await
        .expect("release");
    sentinel.hold_replication().await;
    match l
        .lock_with("unreplicated", opts(Duration::from_secs(5)))
        .await
    {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("replicas"), "{message}")
        }
        other => panic!("expected a refusal for want of replicas, got {other:?}"),
    }
    // Given back on the master: nobody holds it.
    let master = sentinel.master().await;
    let key = master
        .cli(&["--scan", "--pattern", "*unreplicated"])
        .unwrap_or_default();
    assert!(!key.lines().any(|k| !k.contains('#')), "left behind: {key}");
    sentinel.resume_replication();
}

/// With `WAIT`, renewals count only once the replicas have them, as grants
/// do. A lock, a permit and a write lock are granted and confirmed; then
/// the replica's link is held, so their renewals reach the master alone.
/// The master dies once the replica's copies of the leases have run out
/// (so no renewal of the first holder can reach the promoted replica in
/// time), and the promoted replica grants each lock to another client. By
/// then each first guard must be `Lost`, its lease over: at risk since its
/// first unconfirmed renewal, it never moved past the deadline the replica
/// had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_renewal_the_replica_missed_does_not_outlive_a_failover() {
    let sentinel = RedisSentinel::start().await;
    let query = format!("prefix={}:&timeout=500ms", fresh_table());
    let first = locker(&sentinel.url(&format!("{query}&wait_replicas=1&wait_timeout=300ms"))).await;
    // The promoted replica has no replica of its own to confirm with.
    let second = locker(&sentinel.url(&query)).await;
    // Longer than a failover takes, so that a lease renewed on the dead
    // master alone would still run when the promoted replica grants the
    // lock again; short enough to kill the master while the link is held.
    let ttl = Duration::from_secs(8);
    let kinds = [
        ("renewed", LockKind::Exclusive),
        ("renewed-permit", LockKind::permit(1)),
        ("renewed-rw", LockKind::Write),
    ];
    let mut guards = Vec::new();
    for (name, kind) in kinds {
        let guard = first
            .lock_kind(name, kind, opts(ttl))
            .await
            .expect("granted while the replica keeps up");
        guards.push(guard);
    }
    let held_from = Instant::now();
    sentinel.hold_replication().await;
    // What the replica has: no renewal sent from now on reaches it.
    let replicated = guards
        .iter()
        .map(|g| g.lease().deadline())
        .max()
        .expect("three guards");
    // Until each keep-alive has tried a renewal since the hold.
    for guard in &guards {
        while guard.state() == LockState::Held
            && guard.lease().sent_at() < held_from
            && Instant::now() < replicated
        {
            sleep(Duration::from_millis(20)).await;
        }
    }
    let before_failover: Vec<(LockState, bool)> = guards
        .iter()
        .map(|g| (g.state(), g.lease().sent_at() < held_from))
        .collect();
    // The leases on the replica end a little after the local deadlines
    // (the drift allowance).
    tokio::time::sleep_until(replicated + Duration::from_millis(500)).await;
    let old = sentinel.kill_master().await;
    sentinel.wait_for_failover(old).await;
    for (guard, (name, kind)) in guards.iter().zip(kinds) {
        let taken = granted(
            &format!("{name} on the promoted replica"),
            ttl,
            async || second.lock_kind(name, kind, opts(ttl)).await.map(Some),
        )
        .await;
        let (state, left) = (guard.state(), guard.lease().remaining());
        eprintln!(
            "redis sentinel with WAIT: {name} granted again; the first guard was {state:?} with {left:?} left"
        );
        assert!(
            state == LockState::Lost && left.is_zero(),
            "{name}: granted to a second owner while the first guard was {state:?} with {left:?} left, its lease renewed on the old master alone"
        );
        drop(taken);
    }
    for ((name, _), (state, unmoved)) in kinds.iter().zip(before_failover) {
        assert!(
            unmoved,
            "{name}: a renewal the replica never had moved the lease's deadline"
        );
        assert_eq!(
            state,
            LockState::AtRisk,
            "{name}: after unconfirmed renewals"
        );
    }
    sentinel.resume_replication();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wait_a_failover_can_grant_a_held_lock_twice() {
    let sentinel = RedisSentinel::start().await;
    let url = sentinel.url(&format!("prefix={}:&timeout=500ms", fresh_table()));
    let (first, second) = (locker(&url).await, locker(&url).await);
    sentinel.hold_replication().await;
    let holder = first
        .lock_with("window", opts(Duration::from_secs(60)))
        .await
        .expect("granted on the master alone");
    let old = sentinel.kill_master().await;
    sentinel.wait_for_failover(old).await;
    let taken = eventually("acquire on the promoted replica", async || {
        busy_is_none(second.try_lock("window").await)
    })
    .await;
    let overlap = taken.is_some();
    // The first holder still holds it as far as it can tell: two owners.
    let still_believed = holder.state() == LockState::Held;
    eprintln!(
        "redis sentinel without WAIT: the promoted replica lacked the holder's key; second owner granted: {}, while the first's lease had {:?} left",
        overlap,
        holder.lease().remaining()
    );
    assert!(
        overlap && still_believed,
        "the lock-loss window was not reproduced"
    );
    // The first holder finds out at its next check with the server (its
    // first request after the failover meets the dead master's connection).
    let held = eventually("is_held after the failover", async || {
        holder.is_held().await
    })
    .await;
    assert!(!held);
    assert_eq!(holder.state(), LockState::Lost);
    sentinel.resume_replication();
}
