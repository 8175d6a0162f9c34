//! etcd beyond the conformance suite: `etcdctl lock` interoperability, FIFO
//! order with one wake-up per release, cleanup, the Jepsen check, the
//! minimum TTL, and leader loss in a three-member cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use conformance_tests::cases;
use conformance_tests::servers::etcd::{Etcd, etcdctl};
use conformance_tests::targets::fresh_table;
use distlock::lock_etcd::EtcdBackend;
use lock_core::backend::LockBackend;
use lock_core::{AcquireOptions, Error, LockState, Locker, Wait};
use tokio::time::{Instant, sleep, timeout};

fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}

const TTL: Duration = Duration::from_secs(4);
const PATIENCE: Wait = Wait::For(Duration::from_secs(30));

async fn backend(url: &str) -> Arc<EtcdBackend> {
    Arc::new(EtcdBackend::connect(url).await.expect("connect"))
}

/// Keys queued under one lock, as etcdctl sees them.
fn queued(etcd: &Etcd, dir: &str) -> usize {
    etcd.members[0]
        .ctl(&["get", "--prefix", dir, "--keys-only"])
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

async fn wait_for_queue(etcd: &Etcd, dir: &str, len: usize) {
    timeout(Duration::from_secs(20), async {
        while queued(etcd, dir) != len {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the queue under {dir} never reached {len}"));
}

/// While distlock holds a lock, `etcdctl lock` waits; while `etcdctl lock`
/// holds it, distlock waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_and_distlock_exclude_each_other() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("etcdctl-held");

    let guard = l
        .lock_with("shared", opts(TTL, Wait::No))
        .await
        .expect("free");
    let script = format!("touch {}; sleep 1", marker.display());
    let mut theirs = etcdctl(
        &etcd.endpoints(),
        &[
            "lock",
            &format!("{prefix}/shared"),
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .expect("run etcdctl lock");
    sleep(Duration::from_millis(1500)).await;
    assert!(
        !marker.exists(),
        "etcdctl lock ran while distlock held the lock"
    );
    guard.release().await.expect("release");
    timeout(Duration::from_secs(20), async {
        while !marker.exists() {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("etcdctl lock got the lock after distlock released it");
    assert!(
        l.try_lock("shared").await.expect("try_lock").is_none(),
        "distlock waits for etcdctl"
    );
    let started = Instant::now();
    let ours = l
        .lock_with("shared", opts(TTL, PATIENCE))
        .await
        .expect("after etcdctl is done");
    assert!(
        theirs.try_wait().expect("etcdctl").is_some(),
        "granted only once etcdctl finished"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    ours.release().await.expect("release");
    let _ = theirs.wait();
}

/// Waiters are granted in the order they queued, and each release wakes
/// exactly one of them: each watches only its predecessor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_order_one_wake_up_per_release() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let shared = backend(&etcd.url(&prefix, "")).await;
    let l = Locker::from_arc(shared as Arc<dyn LockBackend>);
    let dir = format!("{prefix}/fifo/");
    cases::fifo_one_wake_up_per_release(&l, 4, TTL, |n| wait_for_queue(etcd, &dir, n)).await;
}

/// A waiter that gives up leaves no key (and no lease) behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let holder = l
        .lock_with("leave", opts(TTL, Wait::No))
        .await
        .expect("free");
    match l
        .lock_with("leave", opts(TTL, Wait::For(Duration::from_millis(500))))
        .await
    {
        Err(Error::WaitTimeout { .. }) => {}
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    assert_eq!(
        queued(etcd, &format!("{prefix}/leave/")),
        1,
        "only the holder's key is left"
    );
    holder.release().await.expect("release");
    assert_eq!(queued(etcd, &format!("{prefix}/leave/")), 0);
}

/// The failure Jepsen found in etcd 3.4.3's lock: a waiter whose lease
/// expired while it waited was still told it held the lock. Here the
/// waiter's lease is revoked behind its back; when its turn comes it must
/// not report success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_died_is_not_granted() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let holder = l
        .lock_with("jepsen", opts(TTL, Wait::No))
        .await
        .expect("free");
    let waiter = {
        let l = l.clone();
        tokio::spawn(async move { l.lock_with("jepsen", opts(TTL, PATIENCE)).await })
    };
    let dir = format!("{prefix}/jepsen/");
    wait_for_queue(etcd, &dir, 2).await;
    let keys = etcd.members[0]
        .ctl(&["get", "--prefix", &dir, "--keys-only"])
        .expect("etcdctl get");
    let holder_lease = format!("{:x}", lock_id(&holder));
    let waiter_lease = keys
        .lines()
        .filter_map(|k| k.rsplit('/').next())
        .find(|id| !id.is_empty() && *id != holder_lease)
        .expect("the waiter's key")
        .to_owned();
    etcd.members[0]
        .ctl(&["lease", "revoke", &waiter_lease])
        .expect("revoke the waiter's lease");
    holder.release().await.expect("release");
    match waiter.await.expect("waiter task") {
        Ok(g) => panic!("granted although its lease was gone: {g:?}"),
        Err(e) => assert!(
            matches!(e, Error::NotHeld { .. } | Error::Unavailable { .. }),
            "{e}"
        ),
    }
}

/// The lease ID distlock derives from a guard's owner token.
fn lock_id(guard: &lock_core::LockGuard) -> i64 {
    let bits = (guard.lease().owner().to_u128() as u64) >> 1;
    i64::try_from(bits).unwrap_or(i64::MAX).max(1)
}

/// TTLs below etcd's minimum lease are refused, naming the minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_below_the_minimum_lease_are_refused() {
    let etcd = Etcd::shared().await;
    let l = Locker::from_arc(backend(&etcd.url(&fresh_table(), "")).await);
    match l
        .lock_with("short", opts(Duration::from_secs(1), Wait::No))
        .await
    {
        Err(e @ Error::InvalidTtl { .. }) => assert!(e.to_string().contains("2s"), "{e}"),
        other => panic!("expected InvalidTtl, got {other:?}"),
    }
}

/// A three-member cluster loses its leader while a lock is held and two
/// waiters queue: never two holders at once, and the waiters get the lock
/// after a new leader is elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_loss_keeps_one_holder_and_waiters_proceed() {
    let etcd = Etcd::start_cluster().await;
    let url = etcd.url(&fresh_table(), "timeout=1s&connect_timeout=2s");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let l = Locker::from_arc(backend(&url).await);
        let (inside, overlaps, count) = (inside.clone(), overlaps.clone(), granted.clone());
        tasks.push(tokio::spawn(async move {
            let g = l
                .lock_with("leader", opts(TTL, Wait::For(Duration::from_secs(60))))
                .await
                .expect("granted");
            if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            count.fetch_add(1, Ordering::SeqCst);
            // The first holder keeps the lock across the election.
            let hold = if i == 0 {
                Duration::from_secs(3)
            } else {
                Duration::from_millis(200)
            };
            tokio::select! {
                () = sleep(hold) => {}
                () = g.lost() => {}
            }
            inside.fetch_sub(1, Ordering::SeqCst);
            let lost = g.state() == LockState::Lost;
            let _ = g.release().await;
            lost
        }));
        if i == 0 {
            timeout(Duration::from_secs(10), async {
                while granted.load(Ordering::SeqCst) == 0 {
                    sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("the first holder");
        }
    }
    sleep(Duration::from_millis(300)).await;
    let leader = etcd.leader().expect("the cluster has a leader");
    leader.process().stop();
    let mut lost = 0;
    for t in tasks {
        lost += usize::from(t.await.expect("contender"));
    }
    println!(
        "etcd leader loss: {} grants, {lost} reported lost",
        granted.load(Ordering::SeqCst)
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert_eq!(
        granted.load(Ordering::SeqCst),
        3,
        "every waiter got the lock after re-election"
    );
}
