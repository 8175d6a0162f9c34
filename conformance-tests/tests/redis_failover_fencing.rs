//! Fencing tokens across a Redis failover when the old master's clock ran
//! ahead of the promoted replica's.
//!
//! A grant's token is `max(counter + 1, server ms × 1000)`. A failover that
//! loses the last grant's counter leaves the next token to the promoted
//! replica's counter and clock, so tokens keep rising only while that
//! clock is not behind the old master's by more than the failover took.
//! Every server here shares one clock and redis-server does not run under
//! libfaketime, so the clock is modelled by its effect, as the fault suite
//! models Redlock's clock jump: a master whose clock runs [`AHEAD`] writes
//! `(its clock in ms) × 1000` to a name's fence counter when it grants, and
//! the tests write that value to the counter by hand where such a master
//! would have, then let the acquire script do the rest.
//!
//! Without `wait_replicas` (Sentinel) and on a cluster, where `WAIT` is
//! refused, the next token is lower: `capabilities()` says
//! `Fencing::BestEffort`. With `wait_replicas` no token is handed out
//! before the replicas have its counter, and tokens keep rising:
//! `Fencing::Strict`.

mod common {
    pub(crate) mod failover;
    pub(crate) mod redis;
}

use conformance_tests::kinds::busy_is_none;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::failover::{eventually, granted};
use common::redis::{locker, opts, prefix};
use conformance_tests::servers::redis::Redis;
use conformance_tests::servers::redis_cluster::RedisCluster;
use conformance_tests::servers::redis_sentinel::RedisSentinel;
use lock_core::{Error, Fencing, FencingToken, Wait};

/// How far the old master's clock runs ahead: more than a failover takes.
const AHEAD: Duration = Duration::from_secs(60);

/// The lock every test here takes.
const NAME: &str = "fenced";

/// Where a master whose clock runs [`AHEAD`] puts the counter when it
/// grants now, less the one the acquire script's `INCR` adds.
fn counter_ahead() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    ((now + AHEAD).as_millis() * 1000 - 1).to_string()
}

/// Sets `key` on `node`; replicated like any write.
fn set(node: &Redis, key: &str, value: &str) {
    let answer = node.cli(&["SET", key, value]);
    assert_eq!(answer.as_deref().map(str::trim), Some("OK"), "SET {key}");
}

/// Sets `key` on `node` alone: the script tells the server to replicate
/// nothing it writes, as if the write were the one a failover loses.
fn set_unreplicated(node: &Redis, key: &str, value: &str) {
    let script = "redis.set_repl(redis.REPL_NONE) return redis.call('SET', KEYS[1], ARGV[1])";
    let answer = node.cli(&["EVAL", script, "1", key, value]);
    assert_eq!(answer.as_deref().map(str::trim), Some("OK"), "SET {key}");
}

fn ttl() -> Duration {
    Duration::from_secs(30)
}

/// Sentinel without `WAIT`: the old master's clock runs ahead, and its
/// earlier grants' counter reached the replica. The replica's link is
/// held; the master grants once more, the replica never has it, and the
/// master dies. The promoted replica grants the lock again (while the
/// first holder's lease runs) with its counter + 1: a token below the one
/// the first holder writes with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_can_send_tokens_back() {
    let sentinel = RedisSentinel::start().await;
    let prefix = prefix();
    let url = sentinel.url(&format!("prefix={prefix}&timeout=500ms"));
    let (a, b) = (locker(&url).await, locker(&url).await);
    let fence = format!("{prefix}{NAME}#fence");
    set(sentinel.master().await, &fence, &counter_ahead());
    let earlier = a
        .lock_with(NAME, opts(ttl(), Wait::No))
        .await
        .expect("free");
    let replicated = earlier.token();
    earlier.release().await.expect("release");
    // Once the replica has everything written so far.
    sentinel.hold_replication().await;
    set(sentinel.master().await, &fence, &counter_ahead());
    let first = a
        .lock_with(NAME, opts(ttl(), Wait::No))
        .await
        .expect("free");
    let old = sentinel.kill_master().await;
    sentinel.wait_for_failover(old).await;
    let second = granted("the lock on the promoted replica", ttl(), async || {
        busy_is_none(b.try_lock(NAME).await)
    })
    .await;
    eprintln!(
        "redis sentinel failover, the old master's clock {AHEAD:?} ahead: tokens {replicated:?} (replicated), {:?} (lost with the master), then {:?}; the first holder {:?} with {:?} left",
        first.token(),
        second.token(),
        first.state(),
        first.lease().remaining()
    );
    sent_back(first.token(), second.token(), b.capabilities().fencing);
    sentinel.resume_replication();
}

/// A cluster: the master of the lock's slot has its clock leap ahead, and
/// the counter its next grant sets is the write the failover loses (set
/// here without replication). The master dies, its replica takes the slot
/// over and grants the lock with its own clock's token: lower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_can_send_tokens_back() {
    let cluster = RedisCluster::start().await;
    let prefix = prefix();
    let url = cluster.url(&format!("prefix={prefix}&timeout=500ms"));
    let (a, b) = (locker(&url).await, locker(&url).await);
    let fence = format!("{prefix}{{{NAME}}}#fence");
    let slot = RedisCluster::slot_of(&fence);
    let earlier = a
        .lock_with(NAME, opts(ttl(), Wait::No))
        .await
        .expect("free");
    earlier.release().await.expect("release");
    set_unreplicated(cluster.master_of_slot(slot).await, &fence, &counter_ahead());
    let first = a
        .lock_with(NAME, opts(ttl(), Wait::No))
        .await
        .expect("free");
    let lost = first.token();
    first.release().await.expect("release");
    cluster.kill_master_of_slot(slot).await;
    cluster.wait_for_failover(slot).await;
    let second = granted("the lock after the failover", ttl(), async || {
        busy_is_none(b.try_lock(NAME).await)
    })
    .await;
    eprintln!(
        "redis cluster failover, the old master's clock {AHEAD:?} ahead: token {lost:?} (its counter lost with the master), then {:?}",
        second.token()
    );
    sent_back(lost, second.token(), b.capabilities().fencing);
}

/// The evidence that tokens went back, and what `capabilities()` must say
/// about it.
fn sent_back(before: FencingToken, after: FencingToken, fencing: Fencing) {
    assert!(
        after < before,
        "the model did not send tokens back: {before:?} then {after:?}"
    );
    assert_eq!(
        fencing,
        Fencing::BestEffort,
        "a failover sent tokens back ({before:?} then {after:?}), yet capabilities() says {fencing:?}"
    );
}

/// Sentinel with `wait_replicas`, the same clock and the same held link:
/// the grant the replica does not have is refused and given back, so no
/// holder ever has its token; after the failover the next token is above
/// every one handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_a_sentinel_failover_keeps_tokens_rising() {
    let sentinel = RedisSentinel::start().await;
    let prefix = prefix();
    let query = format!("prefix={prefix}&timeout=500ms");
    let a = locker(&sentinel.url(&format!("{query}&wait_replicas=1&wait_timeout=300ms"))).await;
    // The promoted replica has no replica of its own to confirm with.
    let b = locker(&sentinel.url(&query)).await;
    let fence = format!("{prefix}{NAME}#fence");
    set(sentinel.master().await, &fence, &counter_ahead());
    let earlier = eventually("a grant the replica confirms", async || {
        a.lock_with(NAME, opts(ttl(), Wait::No)).await
    })
    .await;
    let handed_out = earlier.token();
    earlier.release().await.expect("release");
    sentinel.hold_replication().await;
    set(sentinel.master().await, &fence, &counter_ahead());
    match a.lock_with(NAME, opts(ttl(), Wait::No)).await {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("replicas"), "{message}")
        }
        other => panic!("expected a refusal for want of replicas, got {other:?}"),
    }
    let old = sentinel.kill_master().await;
    sentinel.wait_for_failover(old).await;
    let next = granted("the lock on the promoted replica", ttl(), async || {
        busy_is_none(b.try_lock(NAME).await)
    })
    .await;
    eprintln!(
        "redis sentinel failover with WAIT, the old master's clock {AHEAD:?} ahead: token {handed_out:?} handed out before, {:?} after",
        next.token()
    );
    assert!(
        next.token() > handed_out,
        "{handed_out:?} then {:?}",
        next.token()
    );
    assert_eq!(a.capabilities().fencing, Fencing::Strict);
    sentinel.resume_replication();
}
