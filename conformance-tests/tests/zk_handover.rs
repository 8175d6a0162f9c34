//! Hand-overs inside one ZooKeeper backend. What they cost is counted by
//! the server itself (the packets `srvr` reports received, on a server of
//! the test's own, so no other test's requests are counted): a mutex's
//! waiter is granted by the release's delete and the read behind it, and
//! a semaphore's waiter is handed its lease node and the count of the
//! leases, and a read-write lock's waiters read a listing its release sends
//! behind its delete; none makes a request of its own. Waiters that give up at any moment, a
//! hand-over under way included, leave no node.

mod common {
    pub(crate) mod zk;
}

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use common::zk::{TTL, children, locker, opts, plain, wait_for_children};
use conformance_tests::kinds::Kinds;
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use lock_core::{Error, LockGuard, LockKind, Locker, Wait};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use zookeeper_client as zk;

const PATIENCE: Wait = Wait::For(Duration::from_secs(60));

/// A session that asks for a long timeout, so that it pings rarely while
/// a test counts (zookeeper-client pings after 3/20 of the session timeout
/// without a request, at most 10 s: 4.5 s here).
const QUIET: &str = "session_timeout=30s";

/// Leases that are not renewed while a test counts: the lease is kept for
/// two thirds of the session timeout at most (20 s here), and renewed a
/// third of the way in.
const LONG: Duration = Duration::from_secs(60);

/// Reads the server's count of packets received, less the `srvr` commands
/// this reader sent (each is counted).
struct Received<'a> {
    zk: &'a ZooKeeper,
    asked: u64,
}

impl<'a> Received<'a> {
    fn new(zk: &'a ZooKeeper) -> Self {
        Self { zk, asked: 0 }
    }

    fn now(&mut self) -> u64 {
        let srvr = self.zk.servers[0].srvr().expect("the server answers srvr");
        self.asked += 1;
        let received: u64 = srvr
            .lines()
            .find_map(|l| l.strip_prefix("Received: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count of packets received in {srvr}"));
        received - self.asked
    }

    /// The count once nothing more arrives for 500 ms: every request sent
    /// so far has been received.
    async fn settled(&mut self) -> u64 {
        let mut last = self.now();
        loop {
            sleep(Duration::from_millis(500)).await;
            let now = self.now();
            if now == last {
                return now;
            }
            last = now;
        }
    }
}

/// A distlock backend and a plain client on a fresh chroot of `zk`.
async fn clients(zk: &ZooKeeper) -> (Locker, zk::Client) {
    let chroot = fresh_table();
    let l = locker(&zk.url(&chroot, QUIET)).await;
    (l, plain(zk, &chroot).await)
}

/// Twelve waiters of one backend queued behind a holder: each release
/// grants the next waiter with the read it sends behind its delete, and
/// the waiter makes no request of its own (a check, a read and a listing,
/// without the hand-over), so the twelve hand-overs and the last release
/// cost 25 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_hand_over_is_the_release_requests_alone() {
    const WAITERS: usize = 12;
    let zk = ZooKeeper::start().await;
    let (l, plain) = clients(&zk).await;
    let holder = l
        .lock_with("chain", opts(LONG, Wait::No))
        .await
        .expect("free");
    let mut waiters = Vec::new();
    for queued in 2..=WAITERS + 1 {
        let l = l.clone();
        waiters.push(tokio::spawn(async move {
            let turn = l.lock_with("chain", opts(LONG, PATIENCE)).await?;
            let token = turn.token();
            turn.release().await?;
            Ok::<_, lock_core::Error>(token)
        }));
        wait_for_children(&plain, "/locks/chain", queued).await;
    }
    let mut received = Received::new(&zk);
    let before = received.settled().await;
    let first = holder.token();
    holder.release().await.expect("release");
    let mut tokens = vec![first];
    for waiter in waiters {
        let token = timeout(Duration::from_secs(60), waiter)
            .await
            .expect("every waiter gets its turn")
            .expect("task")
            .expect("turn");
        tokens.push(token);
    }
    let requests = received.settled().await - before;
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "turns in queue order: {tokens:?}"
    );
    assert!(children(&plain, "/locks/chain").await.is_empty());
    // Two requests per hand-over and one for the last release; a little
    // room for a ping.
    let bound = 2 * WAITERS as u64 + 1 + 2;
    assert!(
        requests <= bound,
        "{requests} requests for {WAITERS} hand-overs and a release; at most {bound} expected"
    );
}

/// The read-write lock the read-write cases share, and where its nodes are.
const SIDES: (&str, &str) = ("sides", "/rwlocks/sides");

/// A side of [`SIDES`], asked for in a task of its own.
fn ask(l: &Locker, kind: LockKind) -> JoinHandle<lock_core::Result<LockGuard>> {
    let l = l.clone();
    tokio::spawn(async move { l.lock_kind(SIDES.0, kind, opts(LONG, PATIENCE)).await })
}

/// The guard `asked` ends with, within a minute.
async fn held(asked: JoinHandle<lock_core::Result<LockGuard>>, what: &str) -> LockGuard {
    timeout(Duration::from_secs(60), asked)
        .await
        .unwrap_or_else(|_| panic!("{what} never held"))
        .expect("task")
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// On a server of its own, one backend's `holders` of [`SIDES`] hold and
/// its `waiters` queue behind them, in that order; the holders release,
/// last first, the count settling after each. The requests the server
/// received from the first release until every waiter held.
async fn requests_to_change_sides(holders: &[LockKind], waiters: &[LockKind]) -> u64 {
    let zk = ZooKeeper::start().await;
    let (l, plain) = clients(&zk).await;
    let mut held_before = Vec::new();
    for &kind in holders {
        held_before.push(held(ask(&l, kind), "a holder").await);
        wait_for_children(&plain, SIDES.1, held_before.len()).await;
    }
    let mut asked = Vec::new();
    for &kind in waiters {
        asked.push(ask(&l, kind));
        wait_for_children(&plain, SIDES.1, holders.len() + asked.len()).await;
    }
    let mut received = Received::new(&zk);
    let before = received.settled().await;
    while let Some(holder) = held_before.pop() {
        holder.release().await.expect("release");
        received.settled().await;
    }
    let mut guards = Vec::new();
    for waiter in asked {
        guards.push(held(waiter, "a waiter").await);
    }
    let requests = received.settled().await - before;
    for guard in guards {
        guard.release().await.expect("release");
    }
    wait_for_children(&plain, SIDES.1, 0).await;
    requests
}

/// A writer holds, and three readers of the same backend queue behind it.
/// Its release sends its delete and, behind it, one listing of the lock's
/// nodes, which every reader reads as its own: no reader makes a request
/// before it holds, where each would check its node and list the queue
/// (three requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_lists_the_lock_for_every_reader_behind_it() {
    let requests = requests_to_change_sides(&[LockKind::Write], &[LockKind::Read; 3]).await;
    // The delete and the listing; a little room for a ping.
    assert!(
        requests <= 2 + 2,
        "{requests} requests from the writer's release to 3 readers holding; 2 expected"
    );
}

/// Three readers hold, and a writer of the same backend queues behind
/// them, watching the last. Each release sends its delete and a listing
/// behind it (2 requests), which the writer reads as its own: it watches
/// the reader the listing still shows before it (1), twice, and holds
/// after the third: 8 requests, where a check and a listing of the
/// writer's own after each release made 14.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_releases_list_the_lock_for_the_writer_behind_them() {
    let requests = requests_to_change_sides(&[LockKind::Read; 3], &[LockKind::Write]).await;
    // A little room for a ping.
    assert!(
        requests <= 8 + 2,
        "{requests} requests from the readers' releases to the writer holding; 8 expected"
    );
}

/// A writer's release whose caller polls it once (its delete goes out)
/// and then stops, as a future parked in a `select!` would be, does not
/// hold the reader of the same backend behind it: the reader, woken by
/// the delete, waits for the release's listing no longer than its
/// patience and a request's timeout, and then reads the lock itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_left_unpolled_midway_holds_no_waiter() {
    let zk = ZooKeeper::start().await;
    let (l, plain) = clients(&zk).await;
    let writer = held(ask(&l, LockKind::Write), "the writer").await;
    let reader = {
        let l = l.clone();
        let patience = opts(LONG, Wait::For(Duration::from_secs(2)));
        tokio::spawn(async move { l.lock_kind(SIDES.0, LockKind::Read, patience).await })
    };
    wait_for_children(&plain, SIDES.1, 2).await;
    let mut release = Box::pin(writer.release());
    std::future::poll_fn(|cx| {
        assert!(release.as_mut().poll(cx).is_pending(), "a round trip");
        std::task::Poll::Ready(())
    })
    .await;
    // The writer's node goes; the reader's stays.
    wait_for_children(&plain, SIDES.1, 1).await;
    let reader = held(reader, "the reader behind a parked release").await;
    reader.release().await.expect("release");
    drop(release);
    wait_for_children(&plain, SIDES.1, 0).await;
}

/// A semaphore of one permit: A holds it, B holds the semaphore's mutex
/// and waits for the leases to change, C waits for the mutex behind B.
/// A's release lists the leases for B (its delete and a listing: 2
/// requests), and B's grant lets the mutex go to C in one transaction that
/// makes C's lease node, with a listing behind it (2); C, finding the
/// permit taken, lists again with a watch (a check, a read and the
/// listing: 3). Seven requests, where B's own check and listing, and C's
/// own lease node and listing, made eleven. Then B's release lists for C
/// (2), and C's grant lets the mutex go (1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphores_waiters_are_handed_their_lease_and_count() {
    let zk = ZooKeeper::start().await;
    let (l, plain) = clients(&zk).await;
    let (mutex, leases) = ("/semaphores/hand/locks", "/semaphores/hand/leases");
    let permit = LockKind::permit(1);
    let a = l
        .lock_kind("hand", permit, opts(LONG, Wait::No))
        .await
        .expect("free");
    let waiter = |name: &'static str| {
        let l = l.clone();
        let (granted, holding) = oneshot::channel();
        let (release, released) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let guard = l.lock_kind("hand", permit, opts(LONG, PATIENCE)).await;
            let guard = guard.unwrap_or_else(|e| panic!("{name}'s permit: {e}"));
            let _ = granted.send(guard.token());
            let _ = released.await;
            guard.release().await.expect("release");
        });
        (holding, release, task)
    };
    let (b_holds, b_release, b) = waiter("B");
    wait_for_children(&plain, leases, 2).await;
    let (c_holds, c_release, c) = waiter("C");
    wait_for_children(&plain, mutex, 2).await;

    // Only the backend's requests while counting: the plain client looks
    // between the counts.
    let mut received = Received::new(&zk);
    let before = received.settled().await;
    a.release().await.expect("release");
    let b_token = timeout(Duration::from_secs(30), b_holds)
        .await
        .expect("B is granted once A releases")
        .expect("B's token");
    let to_b = received.settled().await - before;
    // C holds the mutex, with its lease node made, and waits.
    assert_eq!(children(&plain, mutex).await.len(), 1);
    assert_eq!(children(&plain, leases).await.len(), 2);

    let before = received.settled().await;
    b_release.send(()).expect("B holds");
    let c_token = timeout(Duration::from_secs(30), c_holds)
        .await
        .expect("C is granted once B releases")
        .expect("C's token");
    let to_c = received.settled().await - before;
    assert!(children(&plain, mutex).await.is_empty());
    c_release.send(()).expect("C holds");
    b.await.expect("B");
    c.await.expect("C");
    wait_for_children(&plain, leases, 0).await;

    assert!(b_token < c_token, "{b_token:?} then {c_token:?}");
    // A little room for a ping.
    assert!(
        to_b <= 8,
        "{to_b} requests from A's release to C waiting; 7 expected"
    );
    assert!(
        to_c <= 4,
        "{to_c} requests from B's release to C's grant; 3 expected"
    );
}

/// Sixteen clients of `l` on `name` for 3 s, client `i` asking for
/// `kind(i)`, each giving up after a random few milliseconds or cancelled
/// at a random point; `holding` runs while one holds. How many grants
/// there were.
async fn churn<F, H>(l: &Locker, name: &'static str, kind: fn(u64) -> LockKind, holding: H) -> u32
where
    H: Fn(LockKind) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + Send,
{
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    let tasks: Vec<_> = (0..16u64)
        .map(|i| {
            let (l, holding, kind) = (l.clone(), holding.clone(), kind(i));
            tokio::spawn(async move {
                let mut granted = 0u32;
                let mut round = i;
                while tokio::time::Instant::now() < until {
                    round = round
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let patience = Duration::from_millis(1 + (round >> 33) % 20);
                    let acquire = l.lock_kind(name, kind, opts(TTL, Wait::For(patience)));
                    let guard = if round % 2 == 0 {
                        // Cancelled: the future is dropped wherever it is.
                        match timeout(patience, acquire).await {
                            Ok(outcome) => outcome,
                            Err(_) => continue,
                        }
                    } else {
                        acquire.await
                    };
                    match guard {
                        Ok(guard) => {
                            granted += 1;
                            holding(kind).await;
                            guard.release().await.expect("release");
                        }
                        Err(Error::WaitTimeout { .. }) => {}
                        // A slow machine may time a request out; a lease
                        // lost under its holder (`NotHeld`) is the failure.
                        Err(e) if e.is_retryable() => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                granted
            })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.expect("task");
    }
    granted
}

/// Sixteen acquirers of one backend on a semaphore of two permits, giving
/// up after a random few milliseconds or cancelled at a random point (a
/// hand-over may be making a lease node for them at that moment): once
/// they stop, no lease node and no node in the semaphore's mutex is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_waiters_that_give_up_mid_hand_over_leave_no_node() {
    let zk = ZooKeeper::start().await;
    let (l, plain) = clients(&zk).await;
    let permit = LockKind::permit(2);
    let granted = churn(&l, "churn", |_| LockKind::permit(2), |_| async {}).await;
    assert!(granted > 0, "no permit was granted");
    for parent in ["/semaphores/churn/leases", "/semaphores/churn/locks"] {
        if timeout(Duration::from_secs(15), async {
            while !children(&plain, parent).await.is_empty() {
                sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .is_err()
        {
            panic!("{parent} keeps {:?}", children(&plain, parent).await);
        }
    }
    // Still usable: both permits can be had (an acquire cancelled above
    // may still be ending in the background).
    let settle = || opts(TTL, Wait::For(Duration::from_secs(10)));
    let (a, b) = (
        l.lock_kind("churn", permit, settle())
            .await
            .expect("a permit"),
        l.lock_kind("churn", permit, settle())
            .await
            .expect("a second permit"),
    );
    a.release().await.expect("release");
    b.release().await.expect("release");
}

/// Sixteen clients of one backend on one read-write lock, a quarter of
/// them writers, giving up after a random few milliseconds or cancelled at
/// a random point (a release may be listing the lock for them at that
/// moment, or they may register while it is in flight): a writer always
/// holds alone, and once they stop no node is left and the lock can be
/// had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_waiters_that_give_up_mid_listing_keep_the_sides_apart() {
    // Readers holding, or -1 while a writer holds.
    let inside = Arc::new(AtomicI64::new(0));
    let zk = ZooKeeper::start().await;
    let (l, plain) = clients(&zk).await;
    let side = |i| match i % 4 {
        0 => LockKind::Write,
        _ => LockKind::Read,
    };
    // Each holds for 1-5 ms, so that a grant that overlaps another's is
    // caught, not missed between two polls.
    let holds = Arc::new(AtomicU64::new(0));
    let holding = move |kind| {
        let inside = inside.clone();
        let hold = Duration::from_millis(1 + holds.fetch_add(1, Ordering::Relaxed) % 5);
        async move {
            if kind == LockKind::Write {
                let was = inside.swap(-1, Ordering::SeqCst);
                assert_eq!(was, 0, "a writer came in beside {was}");
                sleep(hold).await;
                inside.store(0, Ordering::SeqCst);
            } else {
                let was = inside.fetch_add(1, Ordering::SeqCst);
                assert!(was >= 0, "a reader came in beside a writer");
                sleep(hold).await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }
        }
    };
    let granted = churn(&l, SIDES.0, side, holding).await;
    assert!(granted > 0, "nobody was ever granted");
    wait_for_children(&plain, SIDES.1, 0).await;
    let settle = opts(TTL, Wait::For(Duration::from_secs(10)));
    let writer = l
        .lock_kind(SIDES.0, LockKind::Write, settle)
        .await
        .expect("the lock can be had");
    writer.release().await.expect("release");
}
