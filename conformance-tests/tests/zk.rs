//! ZooKeeper beyond the conformance suite, on a healthy server: Curator's
//! node layout (and exclusion with a Curator-style locker), FIFO with one
//! wake-up per release, a create whose reply is lost, cleanup of waiters
//! that give up and of empty parents, czxid fencing across a recreated
//! parent, digest ACLs and redaction. Sessions cut off, servers lost and
//! followers cut off from the leader are in `zk_faults.rs`.

mod common {
    pub(crate) mod zk;
}

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::zk::{TTL, backend, children, locker, opts, plain, wait_for_children};
use conformance_tests::cases;
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use distlock::lock_zk::ZkBackend;
use distlock::lock_zk::config::ZkConfig;
use lock_core::backend::LockBackend;
use lock_core::{Error, Locker, Wait};
use tokio::time::{sleep, timeout};
use zookeeper_client as zk;

const PATIENCE: Wait = Wait::For(Duration::from_secs(30));

async fn czxid(client: &zk::Client, path: &str) -> u64 {
    let (_, stat) = client.get_data(path).await.expect("read a node");
    u64::try_from(stat.czxid).expect("czxid")
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
    let l = Locker::from_arc(shared as Arc<dyn LockBackend>);
    let client = plain(zk, &chroot).await;
    cases::fifo_one_wake_up_per_release(&l, 5, TTL, |n| {
        wait_for_children(&client, "/locks/fifo", n)
    })
    .await;
}

/// The reply to the create is lost with the connection: the node exists
/// although the client never heard so. The retry finds it by the owner's
/// id in its name, and uses it: one create in all, one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_reply_is_lost_is_found_again_not_repeated() {
    let zk = ZooKeeper::shared().await;
    let proxy = Proxy::to(zk.servers[0].socket_addr()).await;
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

/// A release hands the lock straight to the next waiter of the same backend
/// only while that waiter's node is still there. Here the waiter's node is
/// deleted behind its back; the waiter of another session queued after it
/// is the one granted, and the first waiter never holds the lock with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_needs_the_next_node_still_there() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let url = zk.url(&chroot, "");
    let (a, b) = (locker(&url).await, locker(&url).await);
    let holder = a
        .lock_with("hand", opts(TTL, Wait::No))
        .await
        .expect("free");
    let client = plain(zk, &chroot).await;
    let mine = {
        let a = a.clone();
        tokio::spawn(async move { a.lock_with("hand", opts(TTL, PATIENCE)).await })
    };
    wait_for_children(&client, "/locks/hand", 2).await;
    let theirs = {
        let b = b.clone();
        tokio::spawn(async move { b.lock_with("hand", opts(TTL, PATIENCE)).await })
    };
    let queued = wait_for_children(&client, "/locks/hand", 3).await;
    let mut by_sequence = queued.clone();
    by_sequence.sort_by_key(|n| n.rsplit('-').next().map(str::to_owned));
    client
        .delete(&format!("/locks/hand/{}", by_sequence[1]), None)
        .await
        .expect("delete the first waiter's node");
    holder.release().await.expect("release");
    let theirs = timeout(Duration::from_secs(20), theirs)
        .await
        .expect("the other session's waiter is granted")
        .expect("task")
        .expect("granted");
    sleep(Duration::from_millis(300)).await;
    if mine.is_finished() {
        let outcome = mine.await.expect("task");
        assert!(
            outcome.is_err(),
            "the waiter whose node was deleted holds the lock with another"
        );
    } else {
        theirs.release().await.expect("release");
        let granted = timeout(Duration::from_secs(20), mine)
            .await
            .expect("the first waiter queues again and is granted")
            .expect("task")
            .expect("granted");
        granted.release().await.expect("release");
    }
}
