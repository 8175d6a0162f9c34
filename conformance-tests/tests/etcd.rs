//! etcd beyond the conformance suite: `etcdctl lock` interoperability, FIFO
//! order with one wake-up per release, cleanup, the Jepsen check, session
//! leases shared per TTL and lost together, the minimum TTL, leader loss
//! in a three-member cluster, and the keys, wake-ups and waits of
//! semaphores and read-write locks.

mod common {
    pub(crate) mod etcd;
}

use conformance_tests::kinds::Kinds;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::etcd::{queued, wait_for_queue};
use conformance_tests::cases;
use conformance_tests::servers::etcd::{Etcd, etcdctl};
use conformance_tests::targets::fresh_table;
use distlock::backends::etcd::EtcdBackend;
use lock_core::backend::LockBackend;
use lock_core::{AcquireOptions, Error, LockKind, LockState, Locker, Wait};
use tokio::time::{Instant, sleep, timeout};

fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}

const TTL: Duration = Duration::from_secs(4);
const PATIENCE: Wait = Wait::For(Duration::from_secs(30));

async fn backend(url: &str) -> Arc<EtcdBackend> {
    Arc::new(EtcdBackend::connect(url).await.expect("connect"))
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
    let finished = dir.path().join("etcdctl-finished");

    let guard = l
        .lock_with("shared", opts(TTL, Wait::No))
        .await
        .expect("free");
    let script = format!(
        "touch {}; sleep 1; touch {}",
        marker.display(),
        finished.display()
    );
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
        l.try_lock("shared").await.is_err_and(|e| e.is_busy()),
        "distlock waits for etcdctl"
    );
    let started = Instant::now();
    let ours = l
        .lock_with("shared", opts(TTL, PATIENCE))
        .await
        .expect("after etcdctl is done");
    // etcdctl deletes its key after its command returns and exits only
    // after revoking its session, so the grant may come before the process
    // ends; what must hold is that the command under etcdctl's lock is over.
    assert!(
        finished.exists(),
        "granted while the command under etcdctl's lock was still running"
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

/// A waiter that gives up leaves no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let holder = l
        .lock_with("leave", opts(TTL, Wait::No))
        .await
        .expect("free");
    // Another task: the holder's own would be told `AlreadyHeld` at once.
    let waiter = l.clone();
    let waited = tokio::spawn(async move {
        waiter
            .lock_with("leave", opts(TTL, Wait::For(Duration::from_millis(500))))
            .await
            .map(|_| ())
    });
    match waited.await.expect("the waiter's task") {
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
/// waiter's session lease is revoked behind its back; when its turn comes it
/// must not report success. Holder and waiter are separate clients, each
/// with its own session lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_died_is_not_granted() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let url = etcd.url(&prefix, "");
    let l = Locker::from_arc(backend(&url).await);
    let holder = l
        .lock_with("jepsen", opts(TTL, Wait::No))
        .await
        .expect("free");
    let waiter = {
        let l = Locker::from_arc(backend(&url).await);
        tokio::spawn(async move { l.lock_with("jepsen", opts(TTL, PATIENCE)).await })
    };
    let dir = format!("{prefix}/jepsen/");
    wait_for_queue(etcd, &dir, 2).await;
    let keys = etcd.members[0]
        .ctl(&["get", "--prefix", &dir, "--keys-only"])
        .expect("etcdctl get");
    let holder_key = format!("{dir}{:x}", key_id(&holder));
    let waiter_key = keys
        .lines()
        .find(|k| !k.is_empty() && *k != holder_key)
        .expect("the waiter's key")
        .to_owned();
    let waiter_lease = lease_of(etcd, &waiter_key);
    etcd.members[0]
        .ctl(&["lease", "revoke", &format!("{waiter_lease:x}")])
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

/// The key ID distlock derives from a guard's owner token.
fn key_id(guard: &lock_core::LockGuard) -> i64 {
    let bits = (guard.lease().owner().to_u128() as u64) >> 1;
    i64::try_from(bits).unwrap_or(i64::MAX).max(1)
}

/// The lease a key is attached to, as etcdctl reports it.
fn lease_of(etcd: &Etcd, key: &str) -> i64 {
    let json = etcd.members[0]
        .ctl(&["get", key, "-w", "json"])
        .expect("etcdctl get -w json");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("etcdctl's JSON");
    parsed["kvs"][0]["lease"]
        .as_i64()
        .unwrap_or_else(|| panic!("no lease on {key}: {json}"))
}

/// Every lock of one client with one TTL shares one session lease: a
/// second lock, and a second acquire after a release, cost no
/// `LeaseGrant`; a lock with another TTL gets a lease of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_of_one_client_share_a_session_lease_per_ttl() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let lease_of_guard = |g: &lock_core::LockGuard, name: &str| {
        lease_of(etcd, &format!("{prefix}/{name}/{:x}", key_id(g)))
    };
    let a = l.lock_with("a", opts(TTL, Wait::No)).await.expect("a");
    let b = l.lock_with("b", opts(TTL, Wait::No)).await.expect("b");
    let c = l.lock_with("c", opts(TTL * 2, Wait::No)).await.expect("c");
    let session = lease_of_guard(&a, "a");
    assert_eq!(lease_of_guard(&b, "b"), session, "one lease per TTL");
    assert_ne!(
        lease_of_guard(&c, "c"),
        session,
        "another TTL, another lease"
    );
    a.release().await.expect("release a");
    assert_eq!(
        queued(etcd, &format!("{prefix}/b/")),
        1,
        "releasing a leaves b's key, on the same lease, alone"
    );
    let again = l
        .lock_with("a", opts(TTL, Wait::No))
        .await
        .expect("a again");
    assert_eq!(lease_of_guard(&again, "a"), session);
    // Held past several TTLs: the session is kept alive by the renewals.
    sleep(TTL * 2).await;
    assert_eq!(b.state(), LockState::Held);
    for g in [again, b, c] {
        g.release().await.expect("release");
    }
}

/// When the session lease goes (revoked behind the client's back), every
/// lock on it is lost, and the next acquire gets a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_loses_every_lock_on_it() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let a = l.lock_with("a", opts(TTL, Wait::No)).await.expect("a");
    let b = l.lock_with("b", opts(TTL, Wait::No)).await.expect("b");
    let session = lease_of(etcd, &format!("{prefix}/a/{:x}", key_id(&a)));
    etcd.members[0]
        .ctl(&["lease", "revoke", &format!("{session:x}")])
        .expect("revoke the session lease");
    for g in [&a, &b] {
        timeout(TTL * 2, g.lost())
            .await
            .expect("the lost signal fires at the next renewal");
    }
    let next = l
        .lock_with("a", opts(TTL, Wait::No))
        .await
        .expect("a again");
    assert_ne!(
        lease_of(etcd, &format!("{prefix}/a/{:x}", key_id(&next))),
        session,
        "a new session"
    );
    next.release().await.expect("release");
    assert!(matches!(a.release().await, Err(Error::Lost { .. })));
    assert!(matches!(b.release().await, Err(Error::Lost { .. })));
}

/// A lock nobody renews or releases (a forgotten bare lease) is freed about
/// its TTL later, although the client's other locks keep their shared
/// session lease alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrenewed_lock_is_freed_although_its_session_lives() {
    let etcd = Etcd::shared().await;
    let url = etcd.url(&fresh_table(), "");
    let l = Locker::from_arc(backend(&url).await);
    let kept = l
        .lock_with("kept", opts(TTL, Wait::No))
        .await
        .expect("kept");
    let forgotten = l
        .lease_kind("forgotten", LockKind::Exclusive, opts(TTL, Wait::No))
        .await
        .expect("forgotten");
    let other = Locker::from_arc(backend(&url).await);
    let g = other
        .lock_with("forgotten", opts(TTL, Wait::For(TTL * 3)))
        .await
        .expect("freed after its TTL");
    assert!(
        forgotten.is_expired(),
        "granted to another before the first deadline"
    );
    assert!(g.token() > forgotten.token());
    assert_eq!(kept.state(), LockState::Held, "the session lives on");
    g.release().await.expect("release");
    kept.release().await.expect("release");
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

/// A release hands the lock straight to the next waiter of the same backend
/// only while that waiter's key is still there. Here the waiter's key is
/// deleted behind its back; the waiter of another client queued after it
/// is the one granted, and the first waiter never holds the lock with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_needs_the_next_key_still_there() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let url = etcd.url(&prefix, "");
    let l = Locker::from_arc(backend(&url).await);
    let holder = l
        .lock_with("hand", opts(TTL, Wait::No))
        .await
        .expect("free");
    let dir = format!("{prefix}/hand/");
    let mine = {
        let l = l.clone();
        tokio::spawn(async move { l.lock_with("hand", opts(TTL, PATIENCE)).await })
    };
    wait_for_queue(etcd, &dir, 2).await;
    let theirs = {
        let other = Locker::from_arc(backend(&url).await);
        tokio::spawn(async move {
            let guard = other.lock_with("hand", opts(TTL, PATIENCE)).await;
            (other, guard)
        })
    };
    wait_for_queue(etcd, &dir, 3).await;
    let keys = etcd.members[0]
        .ctl(&[
            "get",
            "--prefix",
            &dir,
            "--keys-only",
            "--sort-by",
            "CREATE",
            "--order",
            "ASCEND",
        ])
        .expect("etcdctl get");
    let first_waiter = keys
        .lines()
        .filter(|k| !k.is_empty())
        .nth(1)
        .expect("the first waiter's key")
        .to_owned();
    etcd.members[0]
        .ctl(&["del", &first_waiter])
        .expect("delete the first waiter's key");
    holder.release().await.expect("release");
    let (_other, theirs) = timeout(Duration::from_secs(20), theirs)
        .await
        .expect("the other client's waiter is granted")
        .expect("task");
    let theirs = theirs.expect("granted");
    sleep(Duration::from_millis(300)).await;
    if mine.is_finished() {
        let outcome = mine.await.expect("task");
        assert!(
            outcome.is_err(),
            "the waiter whose key was deleted holds the lock with another"
        );
    }
    theirs.release().await.expect("release");
}

/// Keys under `dir`, oldest first, as etcdctl sees them.
fn keys_by_age(etcd: &Etcd, dir: &str) -> Vec<String> {
    etcd.members[0]
        .ctl(&[
            "get",
            "--prefix",
            dir,
            "--keys-only",
            "--sort-by",
            "CREATE",
            "--order",
            "ASCEND",
        ])
        .expect("etcdctl get")
        .lines()
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A key's create revision and value, as etcdctl reports them.
fn created_with(etcd: &Etcd, key: &str) -> (u64, String) {
    let json = etcd.members[0]
        .ctl(&["get", key, "-w", "json"])
        .expect("etcdctl get -w json");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("etcdctl's JSON");
    let revision = parsed["kvs"][0]["create_revision"]
        .as_u64()
        .unwrap_or_else(|| panic!("no key {key}: {json}"));
    let value = etcd.members[0]
        .ctl(&["get", key, "--print-value-only"])
        .expect("etcdctl get")
        .trim()
        .to_owned();
    (revision, value)
}

fn permit_opts(wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(TTL).wait(wait)
}

/// A semaphore's keys: one lease key per permit taken or waited for under
/// `{name}#sem/leases/` (and nothing else under `{name}#sem/`), each named
/// after the owner token, valued with it, on a session lease, and created
/// at the grant's token; a read-write lock's `{name}#rw/read/` and
/// `.../write/` keys, in one order by create revision. The mutex's range of
/// the same name stays empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_read_write_keys_are_laid_out_as_documented() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let (sem, leases) = (
        format!("{prefix}/pool#sem/"),
        format!("{prefix}/pool#sem/leases/"),
    );

    let holder = l
        .lock_kind("pool", LockKind::permit(1), permit_opts(Wait::No))
        .await
        .expect("a free permit");
    let held = format!("{leases}{:x}", key_id(&holder));
    assert_eq!(keys_by_age(etcd, &sem), std::slice::from_ref(&held));
    let (revision, value) = created_with(etcd, &held);
    assert_eq!(
        revision,
        holder.token().get(),
        "the token is the key's create revision"
    );
    assert_eq!(value, holder.lease().owner().to_hex());
    assert_ne!(lease_of(etcd, &held), 0, "on a session lease");

    let waiter = {
        let l = l.clone();
        tokio::spawn(async move {
            l.lock_kind("pool", LockKind::permit(1), permit_opts(PATIENCE))
                .await
        })
    };
    // The waiter has put its lease key: the second oldest of two, with one
    // permit.
    wait_for_queue(etcd, &sem, 2).await;
    let waiting = keys_by_age(etcd, &sem)[1].clone();
    assert!(waiting.starts_with(&leases), "{waiting}");
    assert_eq!(
        queued(etcd, &format!("{prefix}/pool/")),
        0,
        "the mutex's range"
    );
    holder.release().await.expect("release");
    let granted = timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter gets the permit")
        .expect("task")
        .expect("granted");
    assert_eq!(keys_by_age(etcd, &sem), std::slice::from_ref(&waiting));
    assert_eq!(
        created_with(etcd, &waiting),
        (granted.token().get(), granted.lease().owner().to_hex()),
        "put again by its grant, with its create revision and value"
    );
    assert_ne!(lease_of(etcd, &waiting), 0, "still on its session lease");
    granted.release().await.expect("release");
    assert!(keys_by_age(etcd, &leases).is_empty());

    let rw = format!("{prefix}/doc#rw/");
    let read = AcquireOptions::with_ttl(TTL);
    let write = AcquireOptions::with_ttl(TTL);
    let r1 = l
        .lock_kind("doc", LockKind::Read, read.wait(Wait::No))
        .await
        .expect("read");
    let writer = {
        let l = l.clone();
        tokio::spawn(async move {
            l.lock_kind("doc", LockKind::Write, write.wait(PATIENCE))
                .await
        })
    };
    wait_for_queue(etcd, &rw, 2).await;
    let r2 = {
        let l = l.clone();
        tokio::spawn(async move {
            l.lock_kind("doc", LockKind::Read, read.wait(PATIENCE))
                .await
        })
    };
    wait_for_queue(etcd, &rw, 3).await;
    let keys = keys_by_age(etcd, &rw);
    assert_eq!(keys[0], format!("{rw}read/{:x}", key_id(&r1)));
    assert!(keys[1].starts_with(&format!("{rw}write/")), "{keys:?}");
    assert!(
        keys[2].starts_with(&format!("{rw}read/")),
        "a reader after a waiting writer queues behind it: {keys:?}"
    );
    assert_eq!(created_with(etcd, &keys[0]).0, r1.token().get());
    assert_eq!(
        queued(etcd, &format!("{prefix}/doc/")),
        0,
        "the mutex's range"
    );
    r1.release().await.expect("release");
    let w = timeout(Duration::from_secs(20), writer)
        .await
        .expect("the writer gets in")
        .expect("task")
        .expect("write lock");
    assert_eq!(created_with(etcd, &keys[1]).0, w.token().get());
    assert!(!r2.is_finished(), "a reader beside the writer");
    w.release().await.expect("release");
    let r2 = timeout(Duration::from_secs(20), r2)
        .await
        .expect("the second reader gets in")
        .expect("task")
        .expect("read lock");
    assert_eq!(created_with(etcd, &keys[2]).0, r2.token().get());
    r2.release().await.expect("release");
    wait_for_queue(etcd, &rw, 0).await;
}

/// The grant a scheme "the waiter at p watches the key at p − N" misses:
/// with 2 permits held by A and B, and C and D waiting, B leaves. The
/// waiter that now fits must be woken although A, not B, is the key N
/// places before it; and when A leaves too, the other one. The TTL is long,
/// so no expiry comes to the rescue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_freed_by_any_holder_wakes_a_waiter() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let leases = format!("{prefix}/any#sem/leases/");
    let ttl = Duration::from_secs(30);
    let opts = AcquireOptions::with_ttl(ttl);
    let a = l
        .lock_kind("any", LockKind::permit(2), opts.wait(Wait::No))
        .await
        .expect("A");
    let b = l
        .lock_kind("any", LockKind::permit(2), opts.wait(Wait::No))
        .await
        .expect("B");
    let (tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for (who, in_line) in [("C", 3), ("D", 4)] {
        let (l, tx) = (l.clone(), tx.clone());
        waiters.push(tokio::spawn(async move {
            let g = l
                .lock_kind(
                    "any",
                    LockKind::permit(2),
                    opts.wait(Wait::For(Duration::from_secs(60))),
                )
                .await
                .expect("a permit in turn");
            tx.send((who, g)).expect("the test listens");
        }));
        wait_for_queue(etcd, &leases, in_line).await;
    }
    sleep(Duration::from_millis(300)).await;
    assert!(granted.try_recv().is_err(), "granted beyond 2 permits");

    let b_token = b.token();
    b.release().await.expect("B leaves");
    let (first, g1) = timeout(Duration::from_secs(5), granted.recv())
        .await
        .expect("a waiter is woken when B's permit is free")
        .expect("grant");
    assert_eq!(first, "C", "waiters are served in order");
    sleep(Duration::from_millis(300)).await;
    assert!(granted.try_recv().is_err(), "granted beyond 2 permits");

    a.release().await.expect("A leaves");
    let (second, g2) = timeout(Duration::from_secs(5), granted.recv())
        .await
        .expect("the other waiter is woken when A's permit is free")
        .expect("grant");
    assert_eq!(second, "D");
    assert!(g2.token() > g1.token() && g1.token() > b_token);
    for g in [g1, g2] {
        g.release().await.expect("release");
    }
    for w in waiters {
        w.await.expect("waiter");
    }
}

/// No herd: many waiters of a semaphore on one client, and each release
/// wakes about one of them. A release wakes the first waiter (it watches
/// the keys ahead of it), whose grant wakes the waiter behind it (a second
/// wake-up), which is first now; the others, each watching the key before
/// its own, sleep on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_release_wakes_about_one_waiter() {
    const WAITERS: usize = 8;
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let url = etcd.url(&prefix, "");
    let leases = format!("{prefix}/herd#sem/leases/");
    let holder = Locker::from_arc(backend(&url).await);
    let mut current = holder
        .lock_kind("herd", LockKind::permit(1), permit_opts(Wait::No))
        .await
        .expect("a free permit");
    let l = Locker::from_arc(backend(&url).await);
    let (tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..WAITERS {
        let (l, tx) = (l.clone(), tx.clone());
        tokio::spawn(async move {
            let g = l
                .lock_kind(
                    "herd",
                    LockKind::permit(1),
                    permit_opts(Wait::For(Duration::from_secs(90))),
                )
                .await;
            let _ = tx.send(g);
        });
    }
    wait_for_queue(etcd, &leases, WAITERS + 1).await;
    sleep(Duration::from_millis(300)).await;
    let mut woken = Vec::new();
    for left in (0..WAITERS).rev() {
        let before = l.stats().wakeups;
        current.release().await.expect("release");
        current = timeout(Duration::from_secs(20), granted.recv())
            .await
            .expect("the next waiter is granted")
            .expect("grant")
            .expect("a permit in turn");
        // Settled: the holder and the waiters left.
        wait_for_queue(etcd, &leases, 1 + left).await;
        sleep(Duration::from_millis(100)).await;
        woken.push(l.stats().wakeups - before);
    }
    current.release().await.expect("release");
    assert!(
        woken.iter().all(|&w| (1..=2).contains(&w)),
        "wake-ups per release: {woken:?} (a herd wakes every waiter)"
    );
}

/// Cancel safety: a semaphore's first waiter dropped while it waits for a
/// permit leaves no key behind, and the waiter behind it is first now and
/// gets the permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_permit_waiter_leaves_no_key() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let leases = format!("{prefix}/drop#sem/leases/");
    let holder = l
        .lock_kind("drop", LockKind::permit(1), permit_opts(Wait::No))
        .await
        .expect("a free permit");
    let spawn_waiter = || {
        let l = l.clone();
        tokio::spawn(async move {
            l.lock_kind("drop", LockKind::permit(1), permit_opts(PATIENCE))
                .await
        })
    };
    let dropped = spawn_waiter();
    wait_for_queue(etcd, &leases, 2).await;
    let first = keys_by_age(etcd, &leases)[1].clone();
    let next = spawn_waiter();
    wait_for_queue(etcd, &leases, 3).await;
    // Watching the key of the one dropped now.
    sleep(Duration::from_millis(200)).await;
    dropped.abort();
    wait_for_queue(etcd, &leases, 2).await;
    assert!(
        !keys_by_age(etcd, &leases).contains(&first),
        "the dropped waiter's key is left"
    );
    holder.release().await.expect("release");
    let g = timeout(Duration::from_secs(20), next)
        .await
        .expect("the next waiter gets the permit")
        .expect("task")
        .expect("granted");
    g.release().await.expect("release");
}

/// A read-write lock's holders are read from its own keys: a key prefix
/// that itself has a `write` segment makes no reader a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_under_a_prefix_with_a_write_segment() {
    let etcd = Etcd::shared().await;
    let prefix = format!("{}/write/app", fresh_table());
    let l = Locker::from_arc(backend(&etcd.url(&prefix, "")).await);
    let doc = l.rwlock("doc");
    let r1 = doc.read_with(opts(TTL, Wait::No)).await.expect("read");
    let r2 = doc.read_with(opts(TTL, Wait::No)).await.expect("read");
    let holders = doc.holders().await.expect("holders");
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(
        holders.iter().all(|h| h.kind == LockKind::Read),
        "{holders:?}"
    );
    r1.release().await.expect("release");
    r2.release().await.expect("release");
}
