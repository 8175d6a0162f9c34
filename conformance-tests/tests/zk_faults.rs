//! ZooKeeper under faults: a disconnection with a live session (at risk,
//! then held again) and one past the session timeout (lost, the lock moves
//! on), a three-server ensemble losing its leader, then its quorum,
//! holders and waiters on a follower cut off from the leader, and calls
//! that share one failed attempt at a new session.

mod common {
    pub(crate) mod bounded;
    pub(crate) mod zk;
}

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::bounded::{all_fail_within, at_once, eventually};
use common::zk::{TTL, backend, children, locker, opts, plain, wait_for_children};
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::zookeeper::{ZkServer, ZooKeeper};
use conformance_tests::targets::fresh_table;
use distlock::backends::zk::ZkBackend;
use lock_core::backend::LockBackend;
use lock_core::{Error, LockHandle, LockState, Locker, Wait};
use tokio::time::{sleep, timeout};
use zookeeper_client as zk;

async fn wait_for_state(handle: &LockHandle, state: LockState, within: Duration) {
    timeout(within, async {
        while handle.state() != state {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never {state:?}; still {:?}", handle.state()));
}

/// Every state a guard goes through, in order.
fn record(handle: &LockHandle) -> Arc<Mutex<Vec<LockState>>> {
    let seen = Arc::new(Mutex::new(vec![handle.state()]));
    let mut changes = handle.watch();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some(state) = changes.changed().await {
            log.lock().expect("poisoned").push(state);
        }
    });
    seen
}

/// Asserts that the recorded states went `AtRisk` and later `Lost`, giving
/// the recorder a moment to see the last change.
async fn assert_at_risk_then_lost(seen: &Mutex<Vec<LockState>>) {
    let _ = timeout(Duration::from_secs(2), async {
        while !seen.lock().expect("poisoned").contains(&LockState::Lost) {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let seen = seen.lock().expect("poisoned").clone();
    let risk = seen.iter().position(|s| *s == LockState::AtRisk);
    let lost = seen.iter().position(|s| *s == LockState::Lost);
    assert!(
        matches!((risk, lost), (Some(r), Some(l)) if r < l),
        "expected AtRisk, then Lost: {seen:?}"
    );
}

/// The ensemble's leader and one of its followers.
fn leader_and_follower(zk: &ZooKeeper) -> (&ZkServer, &ZkServer) {
    let leader = zk.leader().expect("the ensemble has a leader");
    let follower = zk
        .servers
        .iter()
        .find(|s| s.mode().as_deref() == Some("follower"))
        .expect("the ensemble has a follower");
    (leader, follower)
}

/// A disconnection whose session is still alive makes the holder at risk,
/// not lost: nobody else gets the lock, and the guard is held again once
/// the connection is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnection_with_a_live_session_is_only_at_risk() {
    let zk = ZooKeeper::shared().await;
    let proxy = Proxy::to(zk.servers[0].socket_addr()).await;
    let chroot = fresh_table();
    let a = locker(&format!(
        "zk://127.0.0.1:{}/{chroot}?session_timeout=9s&timeout=500ms",
        proxy.port()
    ))
    .await;
    let b = locker(&zk.url(&chroot, "")).await;
    let guard = a
        .lock_with("risk", opts(TTL, Wait::No))
        .await
        .expect("free");
    assert_eq!(
        guard.lease().ttl(),
        Duration::from_secs(6),
        "a lease lasts at most two thirds of the session timeout"
    );
    let handle = guard.handle();
    proxy.set(Fault::Stall);
    wait_for_state(&handle, LockState::AtRisk, Duration::from_secs(10)).await;
    assert!(
        b.try_lock("risk").await.is_err_and(|e| e.is_busy()),
        "the session lives, and its lock with it"
    );
    proxy.set(Fault::None);
    wait_for_state(&handle, LockState::Held, Duration::from_secs(10)).await;
    guard.release().await.expect("still ours");
}

/// When the session expires (the server heard nothing for the session
/// timeout), the holder is told it lost the lock — at risk first, then lost
/// before the server frees the node — another client gets it, and the
/// backend carries on with a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_is_lost_and_the_lock_moves_on() {
    let zk = ZooKeeper::shared().await;
    let proxy = Proxy::to(zk.servers[0].socket_addr()).await;
    let chroot = fresh_table();
    let a_backend = backend(&format!(
        "zk://127.0.0.1:{}/{chroot}?session_timeout=1500ms&timeout=300ms",
        proxy.port()
    ))
    .await;
    let a = Locker::from_arc(a_backend.clone() as Arc<dyn LockBackend>);
    let b = locker(&zk.url(&chroot, "")).await;
    let first_session = a_backend.session_id().expect("a session");
    let guard = a
        .lock_with("expiry", opts(TTL, Wait::No))
        .await
        .expect("free");
    let seen = record(&guard.handle());
    proxy.set(Fault::Stall);
    let next = b
        .lock_with("expiry", opts(TTL, Wait::For(Duration::from_secs(20))))
        .await
        .expect("granted once the holder's session expired");
    assert_eq!(guard.state(), LockState::Lost, "lost before the next grant");
    assert_at_risk_then_lost(&seen).await;
    assert!(next.token() > guard.token());
    proxy.set(Fault::None);
    match a_backend.renew(&guard.lease(), TTL).await {
        Err(Error::NotHeld { .. }) => {}
        other => panic!("renewing a lease of an expired session: {other:?}"),
    }
    match guard.release().await {
        Err(Error::Lost { .. }) => {}
        other => panic!("releasing a lost lock: {other:?}"),
    }
    assert_eq!(
        b.holder("expiry").await.expect("holder").map(|h| h.token),
        Some(Some(next.token()))
    );
    next.release().await.expect("release");
    let again = a
        .lock_with("expiry", opts(TTL, Wait::For(Duration::from_secs(20))))
        .await
        .expect("the backend makes a new session");
    assert_ne!(a_backend.session_id(), Some(first_session));
    again.release().await.expect("release");
}

/// The leader dies while a lock is held and two clients wait: never two
/// holders at once, tokens keep growing, and every waiter gets the lock
/// after the election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_keeps_one_holder_and_waiters_proceed() {
    let zk = ZooKeeper::start_ensemble().await;
    let url = zk.url(
        &fresh_table(),
        "session_timeout=6s&timeout=1s&connect_timeout=3s",
    );
    let inside = Arc::new(Mutex::new(0usize));
    let overlaps = Arc::new(Mutex::new(0usize));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let l = locker(&url).await;
        let (inside, overlaps, granted) = (inside.clone(), overlaps.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let g = l
                .lock_with("leader", opts(TTL, Wait::For(Duration::from_secs(60))))
                .await
                .expect("granted");
            {
                let mut n = inside.lock().expect("poisoned");
                *n += 1;
                if *n > 1 {
                    *overlaps.lock().expect("poisoned") += 1;
                }
            }
            granted.lock().expect("poisoned").push(g.token().get());
            let hold = if i == 0 {
                Duration::from_secs(3)
            } else {
                Duration::from_millis(200)
            };
            tokio::select! {
                () = sleep(hold) => {}
                () = g.lost() => {}
            }
            *inside.lock().expect("poisoned") -= 1;
            let _ = g.release().await;
        }));
        if i == 0 {
            timeout(Duration::from_secs(10), async {
                while tokens.lock().expect("poisoned").is_empty() {
                    sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("the first holder");
        }
    }
    sleep(Duration::from_millis(300)).await;
    let leader = zk.leader().expect("the ensemble has a leader");
    leader.process().kill();
    for t in tasks {
        t.await.expect("contender");
    }
    assert_eq!(
        *overlaps.lock().expect("poisoned"),
        0,
        "two holders at once"
    );
    let tokens = tokens.lock().expect("poisoned").clone();
    assert_eq!(tokens.len(), 3, "every waiter got the lock: {tokens:?}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// Two of three servers die while a lock is held and a client waits: the
/// holder goes at risk, then lost; nobody is granted the lock while the
/// quorum is gone; once it is back there is exactly one holder, the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_quorum_grants_nothing_then_exactly_one_holder() {
    let zk = ZooKeeper::start_ensemble().await;
    let chroot = fresh_table();
    let url = zk.url(
        &chroot,
        "session_timeout=2s&timeout=500ms&connect_timeout=2s",
    );
    let (holder, waiter, late) = (locker(&url).await, locker(&url).await, locker(&url).await);
    let guard = holder
        .lock_with("quorum", opts(TTL, Wait::No))
        .await
        .expect("free");
    let seen = record(&guard.handle());
    let waiting = tokio::spawn(async move {
        waiter
            .lock_with("quorum", opts(TTL, Wait::For(Duration::from_secs(60))))
            .await
    });
    {
        let client = plain(&zk, &chroot).await;
        wait_for_children(&client, "/locks/quorum", 2).await;
    }
    zk.servers[1].process().kill();
    zk.servers[2].process().kill();
    timeout(Duration::from_secs(15), guard.lost())
        .await
        .expect("the holder learns it lost the lock");
    assert_at_risk_then_lost(&seen).await;
    match late
        .lock_with("quorum", opts(TTL, Wait::For(Duration::from_secs(2))))
        .await
    {
        Ok(g) => panic!("granted without a quorum: {g:?}"),
        Err(e) => assert!(e.is_retryable(), "{e}"),
    }
    assert!(
        !waiting.is_finished(),
        "the waiter was granted without a quorum"
    );
    zk.servers[1].process().restart();
    zk.servers[2].process().restart();
    zk.wait_ready().await;
    let next = timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiter is granted after recovery")
        .expect("waiter task")
        .expect("granted");
    assert!(next.token() > guard.token());
    let client = plain(&zk, &chroot).await;
    // A server that just came back may lag behind the leader: catch up.
    client.sync("/locks/quorum").await.expect("sync");
    let nodes = children(&client, "/locks/quorum").await;
    assert_eq!(nodes.len(), 1, "exactly one holder: {nodes:?}");
    assert!(
        nodes[0].starts_with(&format!("_c_{}", next.lease().owner().short())),
        "{nodes:?}"
    );
    assert_eq!(guard.state(), LockState::Lost);
    assert_eq!(
        late.holder("quorum")
            .await
            .expect("holder")
            .map(|h| h.token),
        Some(Some(next.token()))
    );
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    next.release().await.expect("release");
}

/// The holder's session is on a follower that is then cut off from the
/// leader while its clients still reach it. Until the follower notices
/// (syncLimit ticks), it answers reads from its old state, so the holder's
/// node is still there for it; meanwhile the leader, hearing nothing of the
/// session, expires it, deletes the node and grants the lock to a waiter.
/// A renewal must be confirmed through the leader: the holder is lost
/// before the waiter is granted, and renewing fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_the_leader_does_not_renew_a_lease() {
    let zk = ZooKeeper::start_ensemble_with_peer_proxies().await;
    let chroot = fresh_table();
    let (leader, follower) = leader_and_follower(&zk);
    let holder_backend = backend(&format!(
        "zk://{}/{chroot}?session_timeout=900ms&timeout=300ms",
        follower.client_addr
    ))
    .await;
    let holder = Locker::from_arc(holder_backend.clone() as Arc<dyn LockBackend>);
    let waiter = locker(&format!("zk://{}/{chroot}", leader.client_addr)).await;
    let guard = holder
        .lock_with("cut-off", opts(TTL, Wait::No))
        .await
        .expect("free");
    let ttl = guard.lease().ttl();
    // Past a few renewals, all through the follower.
    sleep(ttl * 2).await;
    assert_eq!(guard.state(), LockState::Held);
    let waiting = tokio::spawn(async move {
        waiter
            .lock_with("cut-off", opts(TTL, Wait::For(Duration::from_secs(20))))
            .await
    });
    let client = plain(&zk, &chroot).await;
    wait_for_children(&client, "/locks/cut-off", 2).await;
    zk.set_peer_fault(follower.id, Fault::Stall);
    let next = timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter is granted once the holder's session expired")
        .expect("waiter task")
        .expect("granted");
    let at_grant = guard.state();
    let renewed = holder_backend.renew(&guard.lease(), TTL).await;
    zk.set_peer_fault(follower.id, Fault::None);
    assert_eq!(
        at_grant,
        LockState::Lost,
        "the holder on the cut-off follower was not lost when the waiter was granted"
    );
    assert!(
        renewed.is_err(),
        "a lease renewed through a cut-off follower after the leader granted the lock again: {renewed:?}"
    );
    assert!(next.token() > guard.token());
    next.release().await.expect("release");
}

/// A waiter's session is on a follower whose messages no longer reach the
/// leader, while the leader's still reach it: the follower's reads are
/// current, but the leader stops hearing that the session lives. The lock
/// is released late in the session timeout; the follower then shows the
/// waiter first, while the leader is about to expire the waiter's session
/// and grant the lock to the next in line. A grant after waiting must be
/// confirmed through the leader, its lease counted from that confirmation:
/// no lease of the first waiter may outlast the next one's grant. Once the
/// leader hears from it again, the first waiter gets the lock in its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_the_leader_cannot_confirm_is_not_made() {
    let zk = ZooKeeper::start_ensemble_with_peer_proxies().await;
    let chroot = fresh_table();
    let (leader, follower) = leader_and_follower(&zk);
    let on_leader = format!("zk://{}/{chroot}", leader.client_addr);
    let (first, third) = (locker(&on_leader).await, locker(&on_leader).await);
    let session_timeout = Duration::from_secs(2);
    let second = locker(&format!(
        "zk://{}/{chroot}?session_timeout={}ms&timeout=300ms",
        follower.client_addr,
        session_timeout.as_millis()
    ))
    .await;
    let held = first
        .lock_with("one-way", opts(TTL, Wait::No))
        .await
        .expect("free");
    let client = zk::Client::connect(&format!("{}/{chroot}", leader.client_addr))
        .await
        .expect("connect a plain client to the leader");
    let patience = opts(TTL, Wait::For(Duration::from_secs(30)));
    let seconds = tokio::spawn(async move { second.lock_with("one-way", patience).await });
    wait_for_children(&client, "/locks/one-way", 2).await;
    let thirds = tokio::spawn(async move { third.lock_with("one-way", patience).await });
    wait_for_children(&client, "/locks/one-way", 3).await;
    zk.set_peer_fault(follower.id, Fault::StallRequests);
    sleep(session_timeout * 7 / 10).await;
    held.release().await.expect("release");
    let next = timeout(Duration::from_secs(20), thirds)
        .await
        .expect("the third is granted once the second's session expired")
        .expect("task")
        .expect("granted");
    let next_granted = tokio::time::Instant::now();
    let answered_first = seconds.is_finished();
    zk.set_peer_fault(follower.id, Fault::None);
    if answered_first {
        let granted = seconds
            .await
            .expect("task")
            .expect("the second keeps waiting while the leader cannot hear it");
        assert!(
            granted.lease().deadline() <= next_granted,
            "the second was granted a lease that outlasted its session: it ends {:?} after the next grant",
            granted.lease().deadline() - next_granted
        );
        next.release().await.expect("release");
        return;
    }
    let next_token = next.token();
    next.release().await.expect("release");
    let second = timeout(Duration::from_secs(30), seconds)
        .await
        .expect("the second is granted once the leader hears from it again")
        .expect("task")
        .expect("granted");
    assert!(second.token() > next_token);
    second.release().await.expect("release");
}

/// Once the session has ended and ZooKeeper is black-holed, ten `try_lock`s
/// at once share one attempt at a new session, and its failure: each fails
/// within 2 × (timeout + connect_timeout), not after the failed attempts of
/// those before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_locks_share_one_failed_attempt_at_a_new_session() {
    const TIMEOUT: Duration = Duration::from_millis(200);
    const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
    let zk = ZooKeeper::shared().await;
    let proxy = Proxy::to(zk.servers[0].socket_addr()).await;
    let url = format!(
        "zk://127.0.0.1:{}/{}?session_timeout=1500ms&timeout={}ms&connect_timeout={}ms",
        proxy.port(),
        fresh_table(),
        TIMEOUT.as_millis(),
        CONNECT_TIMEOUT.as_millis()
    );
    // Timeouts this short may run out on a loaded machine: the setting up
    // tries again.
    let a_backend = Arc::new(eventually("connect", || ZkBackend::connect(&url)).await);
    let a = Locker::from_arc(a_backend.clone() as Arc<dyn LockBackend>);
    let opts = opts(TTL, Wait::No);
    eventually("a lock through the proxy", async || {
        a.lock_with("before", opts).await?.release().await
    })
    .await;
    // The client ends the session once it has heard nothing for longer
    // than the session timeout; the next call must make a new one.
    proxy.set(Fault::Stall);
    timeout(Duration::from_secs(20), async {
        while a_backend.session_id().is_some() {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the session ended");
    let tries = at_once(10, |i| {
        let a = a.clone();
        async move { a.lock_with(format!("try-{i}"), opts).await }
    });
    let bound = 2 * (TIMEOUT + CONNECT_TIMEOUT);
    let slowest = all_fail_within("try_lock", tries, bound).await;
    eprintln!("ten try_locks with ZooKeeper black-holed: the slowest took {slowest:?}");
}
