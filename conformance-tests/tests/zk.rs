//! ZooKeeper beyond the conformance suite: Curator's node layout (and
//! exclusion with a Curator-style locker), FIFO with one wake-up per release,
//! a create whose reply is lost, cleanup of waiters that give up and of
//! empty parents, czxid fencing across a recreated parent, sessions
//! (disconnected is at risk, expired is lost), digest ACLs and redaction,
//! a three-server ensemble losing its leader, then its quorum, and holders
//! and waiters on a follower cut off from the leader.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conformance_tests::cases;
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use distlock::lock_zk::ZkBackend;
use distlock::lock_zk::config::ZkConfig;
use lock_core::{AcquireOptions, Error, LockBackend, LockHandle, LockState, Locker, Wait};
use tokio::time::{sleep, timeout};
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);
const PATIENCE: Wait = Wait::For(Duration::from_secs(30));

fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}

async fn backend(url: &str) -> Arc<ZkBackend> {
    Arc::new(ZkBackend::connect(url).await.expect("connect"))
}

async fn locker(url: &str) -> Locker {
    Locker::from_arc(backend(url).await)
}

/// A plain ZooKeeper client inside `chroot` (which must exist), to look at
/// the nodes distlock makes.
async fn plain(zk: &ZooKeeper, chroot: &str) -> zk::Client {
    zk::Client::connect(&format!("{}/{chroot}", zk.connect_string()))
        .await
        .expect("connect a plain client")
}

async fn children(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(mut c) => {
            c.sort();
            c
        }
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

async fn wait_for_children(client: &zk::Client, path: &str, count: usize) -> Vec<String> {
    timeout(Duration::from_secs(20), async {
        loop {
            let now = children(client, path).await;
            if now.len() == count {
                return now;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{path} never had {count} children"))
}

async fn czxid(client: &zk::Client, path: &str) -> u64 {
    let (_, stat) = client.get_data(path).await.expect("read a node");
    u64::try_from(stat.czxid).expect("czxid")
}

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
        while changes.changed().await.is_ok() {
            let state = *changes.borrow_and_update();
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

/// distlock's nodes are Curator's (`_c_<uuid>-lock-<sequence>`, the uuid
/// being the owner token), the token is the node's czxid, and a
/// Curator-compatible locker (zookeeper-client's `LockPrefix::new_curator`,
/// the layout of Curator's `InterProcessMutex`) and distlock exclude each
/// other both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_layout_and_mutual_exclusion_with_a_curator_style_locker() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let l = locker(&zk.url(&chroot, "")).await;
    let guard = l
        .lock_with("interop", opts(TTL, Wait::No))
        .await
        .expect("free");
    let client = plain(zk, &chroot).await;
    let nodes = children(&client, "/locks/interop").await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let hex = guard.lease().owner().to_hex();
    let uuid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let (head, sequence) = nodes[0].split_at(nodes[0].len() - 10);
    assert_eq!(head, format!("_c_{uuid}-lock-"), "{nodes:?}");
    assert!(sequence.chars().all(|c| c.is_ascii_digit()), "{nodes:?}");
    assert_eq!(
        guard.token().get(),
        czxid(&client, &format!("/locks/interop/{}", nodes[0])).await,
        "the fencing token is the node's czxid"
    );

    let theirs_held = Arc::new(AtomicBool::new(false));
    let (let_go, go) = tokio::sync::oneshot::channel::<()>();
    let curator = {
        let held = theirs_held.clone();
        let client = plain(zk, &chroot).await;
        tokio::spawn(async move {
            let prefix = zk::LockPrefix::new_curator("/locks/interop", "lock-").expect("prefix");
            let lock = client
                .lock(prefix, b"", zk::Acls::anyone_all())
                .await
                .expect("the Curator-style lock");
            held.store(true, Ordering::SeqCst);
            let _ = go.await;
            let path = lock.lock_path().to_owned();
            drop(lock); // deletes its node in the background
            while client.check_stat(&path).await.ok().flatten().is_some() {
                sleep(Duration::from_millis(10)).await;
            }
        })
    };
    wait_for_children(&client, "/locks/interop", 2).await;
    sleep(Duration::from_millis(500)).await;
    assert!(
        !theirs_held.load(Ordering::SeqCst),
        "the Curator-style locker got the lock while distlock held it"
    );
    guard.release().await.expect("release");
    timeout(Duration::from_secs(10), async {
        while !theirs_held.load(Ordering::SeqCst) {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the Curator-style locker gets the lock after distlock releases it");
    assert!(
        l.try_lock("interop").await.expect("try_lock").is_none(),
        "distlock respects the Curator-style holder"
    );
    let ours = {
        let l = l.clone();
        tokio::spawn(async move { l.lock_with("interop", opts(TTL, PATIENCE)).await })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(
        !ours.is_finished(),
        "distlock waits for the Curator-style holder"
    );
    let_go.send(()).expect("the Curator-style task");
    let ours = ours
        .await
        .expect("task")
        .expect("granted after the other let go");
    assert!(curator.is_finished() || timeout(Duration::from_secs(5), curator).await.is_ok());
    ours.release().await.expect("release");
}

/// Waiters are granted in the order they queued, and each release wakes
/// exactly one of them (one watch event per release: no herd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_order_one_wake_up_per_release() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let shared = backend(&zk.url(&chroot, "")).await;
    let l = Locker::from_arc(shared.clone() as Arc<dyn LockBackend>);
    let client = plain(zk, &chroot).await;
    cases::fifo_one_wake_up_per_release(
        &l,
        5,
        TTL,
        || shared.wakeups(),
        |n| wait_for_children(&client, "/locks/fifo", n),
    )
    .await;
}

/// The reply to the create is lost with the connection: the node exists
/// although the client never heard so. The retry finds it by the owner's
/// id in its name, and uses it: one create in all, one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_reply_is_lost_is_found_again_not_repeated() {
    let zk = ZooKeeper::shared().await;
    let proxy = Proxy::start(zk.servers[0].port()).await;
    let chroot = fresh_table();
    let url = format!(
        "zk://127.0.0.1:{}/{chroot}?timeout=2s&session_timeout=6s",
        proxy.port()
    );
    let l = locker(&url).await;
    let client = plain(zk, &chroot).await;
    // The parent exists, so the lock node's create is the first request.
    client
        .mkdir(
            "/locks/lost-reply",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("make the parent");
    proxy.set(Fault::DropNextReply);
    let guard = l
        .lock_with("lost-reply", opts(TTL, Wait::For(Duration::from_secs(20))))
        .await
        .expect("granted although the create's reply was lost");
    assert_eq!(proxy.fault(), Fault::None, "the proxy dropped a reply");
    let nodes = children(&client, "/locks/lost-reply").await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert!(
        nodes[0].starts_with(&format!("_c_{}", guard.lease().owner().short())),
        "{nodes:?}"
    );
    let (_, parent) = client
        .get_data("/locks/lost-reply")
        .await
        .expect("the parent");
    assert_eq!(
        parent.cversion, 1,
        "exactly one node was ever created under the parent"
    );
    assert_eq!(
        guard.token().get(),
        czxid(&client, &format!("/locks/lost-reply/{}", nodes[0])).await
    );
    guard.release().await.expect("release");
    assert!(children(&client, "/locks/lost-reply").await.is_empty());
}

/// A waiter that times out, and one whose acquire is dropped, remove their
/// nodes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_give_up_or_are_cancelled_leave_no_node() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let url = zk.url(&chroot, "");
    let (a, b) = (locker(&url).await, locker(&url).await);
    let holder = a
        .lock_with("leave", opts(TTL, Wait::No))
        .await
        .expect("free");
    let client = plain(zk, &chroot).await;
    match b
        .lock_with("leave", opts(TTL, Wait::For(Duration::from_millis(300))))
        .await
    {
        Err(Error::WaitTimeout { .. }) => {}
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    assert_eq!(children(&client, "/locks/leave").await.len(), 1);
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock_with("leave", opts(TTL, Wait::Forever)).await })
    };
    wait_for_children(&client, "/locks/leave", 2).await;
    waiting.abort();
    wait_for_children(&client, "/locks/leave", 1).await;
    holder.release().await.expect("release");
    assert!(children(&client, "/locks/leave").await.is_empty());
}

/// Lock parents are container nodes, which the server deletes once empty;
/// without them (an old server, or `container_parents` off) distlock
/// deletes an empty parent itself when it releases or gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_lock_parents_do_not_pile_up() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let url = zk.url(&chroot, "");
    let l = locker(&url).await;
    let client = plain(zk, &chroot).await;
    for name in ["p1", "p2", "p3"] {
        let g = l.lock_with(name, opts(TTL, Wait::No)).await.expect("free");
        let _ = l
            .lock_with(name, opts(TTL, Wait::For(Duration::from_millis(50))))
            .await
            .expect_err("held");
        g.release().await.expect("release");
    }
    timeout(Duration::from_secs(20), async {
        while !children(&client, "/locks").await.is_empty() {
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the server deletes empty container parents");

    let mut config = ZkConfig::parse(&url).expect("url");
    config.container_parents = false;
    let plain_parents = Locker::new(ZkBackend::connect_with(config).await.expect("connect"));
    let g = plain_parents
        .lock_with("p4", opts(TTL, Wait::No))
        .await
        .expect("free");
    let _ = plain_parents
        .lock_with("p4", opts(TTL, Wait::For(Duration::from_millis(50))))
        .await
        .expect_err("held");
    assert_eq!(children(&client, "/locks/p4").await.len(), 1);
    g.release().await.expect("release");
    assert!(
        children(&client, "/locks").await.is_empty(),
        "the release deleted the empty parent"
    );
}

/// The fencing token is the czxid, not the sequence number: when the parent
/// is deleted and made again, sequence numbers start over at zero but
/// tokens keep growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn czxid_tokens_keep_growing_when_the_parent_is_recreated() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let mut config = ZkConfig::parse(&zk.url(&chroot, "")).expect("url");
    config.container_parents = false;
    let l = Locker::new(ZkBackend::connect_with(config).await.expect("connect"));
    let client = plain(zk, &chroot).await;
    let mut last = 0;
    for round in 0..3 {
        let g = l
            .lock_with("fence", opts(TTL, Wait::No))
            .await
            .expect("free");
        let nodes = children(&client, "/locks/fence").await;
        assert_eq!(nodes.len(), 1);
        assert!(
            nodes[0].ends_with("-lock-0000000000"),
            "round {round}: a new parent starts its sequence at zero: {nodes:?}"
        );
        assert_eq!(
            g.token().get(),
            czxid(&client, &format!("/locks/fence/{}", nodes[0])).await
        );
        assert!(g.token().get() > last, "tokens grow across parents");
        last = g.token().get();
        g.release().await.expect("release");
        assert!(
            client
                .check_stat("/locks/fence")
                .await
                .expect("stat")
                .is_none(),
            "the parent is gone after the release"
        );
    }
}

/// A disconnection whose session is still alive makes the holder at risk,
/// not lost: nobody else gets the lock, and the guard is held again once
/// the connection is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnection_with_a_live_session_is_only_at_risk() {
    let zk = ZooKeeper::shared().await;
    let proxy = Proxy::start(zk.servers[0].port()).await;
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
        b.try_lock("risk").await.expect("try_lock").is_none(),
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
    let proxy = Proxy::start(zk.servers[0].port()).await;
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
        Some(next.token())
    );
    next.release().await.expect("release");
    let again = a
        .lock_with("expiry", opts(TTL, Wait::For(Duration::from_secs(20))))
        .await
        .expect("the backend makes a new session");
    assert_ne!(a_backend.session_id(), Some(first_session));
    again.release().await.expect("release");
}

/// The URL's digest credentials authenticate the session and put the
/// creator-only ACL on every node; the password shows nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_puts_acls_on_the_nodes_and_stays_secret() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let url = zk.url(&chroot, "auth=digest:alice:s3cr3t-pw");
    let alice = backend(&url).await;
    let shown = format!("{alice:?}");
    assert!(
        !shown.contains("s3cr3t-pw") && shown.contains("alice"),
        "{shown}"
    );
    let l = Locker::from_arc(alice.clone() as Arc<dyn LockBackend>);
    let guard = l.lock_with("acl", opts(TTL, Wait::No)).await.expect("free");
    let also_alice = locker(&url).await;
    assert!(
        also_alice
            .try_lock("acl")
            .await
            .expect("try_lock")
            .is_none(),
        "the same credentials share the lock"
    );
    let anonymous = zk::Client::connect(&zk.connect_string())
        .await
        .expect("connect");
    match anonymous.list_children(&format!("/{chroot}")).await {
        Err(zk::Error::NoAuth) => {}
        other => panic!("the chroot is readable without credentials: {other:?}"),
    }
    let mallory = locker(&zk.url(&chroot, "auth=digest:alice:wrong")).await;
    match mallory.try_lock("acl").await {
        Err(e) => {
            assert!(!e.is_retryable(), "{e}");
            assert!(!format!("{e} {e:?}").contains("s3cr3t-pw"), "{e:?}");
        }
        Ok(got) => panic!("other credentials got through: {got:?}"),
    }
    guard.release().await.expect("release");
    let err = distlock::connect(&format!("{url}&bogus=1"))
        .await
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains("s3cr3t-pw"), "{err:?}");
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
        Some(next.token())
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
    let leader = zk.leader().expect("the ensemble has a leader");
    let follower = zk
        .servers
        .iter()
        .find(|s| s.mode().as_deref() == Some("follower"))
        .expect("the ensemble has a follower");
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
    let leader = zk.leader().expect("the ensemble has a leader");
    let follower = zk
        .servers
        .iter()
        .find(|s| s.mode().as_deref() == Some("follower"))
        .expect("the ensemble has a follower");
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
