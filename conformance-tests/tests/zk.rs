//! ZooKeeper beyond the conformance suite, on a healthy server: Curator's
//! node layouts (exclusion with a Curator-style locker; semaphores and
//! read-write locks sharing with nodes made by hand in Curator's layouts,
//! as its `InterProcessSemaphoreV2` and `InterProcessReadWriteLock` make
//! them), FIFO with one
//! wake-up per release, a create whose reply is lost, cleanup of waiters
//! that give up and of empty parents, czxid fencing across a recreated
//! parent, digest ACLs and redaction. Sessions cut off, servers lost and
//! followers cut off from the leader are in `zk_faults.rs`.

mod common {
    pub(crate) mod zk;
}

use conformance_tests::kinds::Kinds;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::zk::{TTL, backend, children, locker, opts, plain, wait_for_children};
use conformance_tests::cases;
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use distlock::backends::zk::ZkBackend;
use distlock::backends::zk::ZkConfig;
use lock_core::backend::LockBackend;
use lock_core::backend::OwnerToken;
use lock_core::{Error, LockKind, Locker, Wait};
use tokio::time::{sleep, timeout};
use zookeeper_client as zk;

const PATIENCE: Wait = Wait::For(Duration::from_secs(30));

async fn czxid(client: &zk::Client, path: &str) -> u64 {
    let (_, stat) = client.get_data(path).await.expect("read a node");
    u64::try_from(stat.czxid).expect("czxid")
}

/// An owner token in the 8-4-4-4-12 form Curator gives its uuids.
fn curator_uuid(owner: OwnerToken) -> String {
    let hex = owner.to_hex();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The one node of `nodes` that `owner` made, named as Curator names a
/// node (`_c_<uuid>-<marker><10 digits>`, the uuid in its 8-4-4-4-12
/// form): the uuid starts with the owner's short holder id and does not
/// carry the rest of its token.
fn named_by_curator<'a>(nodes: &'a [String], owner: OwnerToken, marker: &str) -> &'a String {
    let head = format!("_c_{}", owner.short());
    let mine: Vec<&String> = nodes.iter().filter(|n| n.starts_with(&head)).collect();
    assert_eq!(mine.len(), 1, "one node of {head}…: {nodes:?}");
    let node = mine[0];
    let uuid = &node[3..39];
    let dashes: Vec<usize> = uuid.match_indices('-').map(|(i, _)| i).collect();
    assert_eq!(dashes, [8, 13, 18, 23], "not a uuid: {node}");
    assert!(
        uuid.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
        "{node}"
    );
    let digits = node
        .strip_prefix(&format!("_c_{uuid}-{marker}"))
        .unwrap_or_else(|| panic!("not a {marker} node: {node}"));
    assert!(
        digits.len() == 10 && digits.chars().all(|c| c.is_ascii_digit()),
        "{nodes:?}"
    );
    let hex = owner.to_hex();
    assert!(
        !uuid.replace('-', "").contains(&hex[8..]) && !node.contains(&curator_uuid(owner)),
        "the node's name carries the owner token: {node}"
    );
    node
}

/// A node made by hand as a Curator recipe makes it: ephemeral-sequential
/// `<parent>/_c_<uuid>-<marker><sequence>` on the plain client's session.
/// Returns its name.
async fn curator_node(client: &zk::Client, parent: &str, marker: &str) -> String {
    client
        .mkdir(
            parent,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("make the parent");
    let prefix = format!("_c_{}-{marker}", curator_uuid(OwnerToken::random()));
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_, sequence) = client
        .create(&format!("{parent}/{prefix}"), b"", &options)
        .await
        .expect("a Curator-style node");
    format!("{prefix}{sequence}")
}

/// distlock's nodes are Curator's (`_c_<uuid>-lock-<sequence>`, the uuid
/// made from the owner token), the token is the node's czxid, and a
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
    named_by_curator(&nodes, guard.lease().owner(), "lock-");
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
        l.try_lock("interop").await.is_err_and(|e| e.is_busy()),
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

/// A semaphore is Curator's `InterProcessSemaphoreV2` at
/// `/semaphores/<name>`: a Curator acquirer holding its mutex (`locks`)
/// keeps distlock out; Curator leases (`leases`) that fill the permits make
/// distlock wait, holding the mutex, until one goes; and distlock's nodes
/// are named as Curator names them, its lease counting for Curator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shares_its_permits_with_curator_leases() {
    const PERMITS: u32 = 2;
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let l = locker(&zk.url(&chroot, "")).await;
    let client = plain(zk, &chroot).await;
    let (mutex, leases) = (
        "/semaphores/sem-interop/locks",
        "/semaphores/sem-interop/leases",
    );
    let permit = |wait| opts(TTL, wait);

    let theirs = curator_node(&client, mutex, "lock-").await;
    match l
        .lock_kind(
            "sem-interop",
            LockKind::permit(PERMITS),
            permit(Wait::For(Duration::from_millis(300))),
        )
        .await
    {
        Err(Error::WaitTimeout { .. }) => {}
        other => panic!("behind a Curator holder of the semaphore's mutex: {other:?}"),
    }
    assert!(
        children(&client, leases).await.is_empty(),
        "a lease was made without the semaphore's mutex"
    );
    assert_eq!(
        children(&client, mutex).await,
        std::slice::from_ref(&theirs)
    );
    client
        .delete(&format!("{mutex}/{theirs}"), None)
        .await
        .expect("the Curator acquirer lets go of the mutex");

    let mut full = Vec::new();
    for _ in 0..PERMITS {
        full.push(curator_node(&client, leases, "lease-").await);
    }
    let ours = {
        let l = l.clone();
        tokio::spawn(async move {
            l.lock_kind("sem-interop", LockKind::permit(PERMITS), permit(PATIENCE))
                .await
        })
    };
    wait_for_children(&client, leases, PERMITS as usize + 1).await;
    sleep(Duration::from_millis(300)).await;
    assert!(
        !ours.is_finished(),
        "distlock took a permit of a semaphore that Curator leases fill"
    );
    let waited_in = children(&client, mutex).await;
    assert_eq!(waited_in.len(), 1, "distlock waits holding the mutex");
    client
        .delete(&format!("{leases}/{}", full.pop().expect("a lease")), None)
        .await
        .expect("a Curator lease is returned");
    let g = timeout(Duration::from_secs(10), ours)
        .await
        .expect("distlock gets the permit a Curator lease returned")
        .expect("task")
        .expect("permit");
    let owner = g.lease().owner();
    named_by_curator(&waited_in, owner, "lock-");
    let nodes = children(&client, leases).await;
    assert_eq!(nodes.len(), PERMITS as usize, "{nodes:?}");
    assert!(nodes.contains(&full[0]), "{nodes:?}");
    let lease = named_by_curator(&nodes, owner, "lease-");
    assert_eq!(
        g.token().get(),
        czxid(&client, &format!("{leases}/{lease}")).await,
        "the fencing token is the lease node's czxid"
    );
    wait_for_children(&client, mutex, 0).await;
    // A Curator acquirer counts the leases, distlock's among them: the
    // semaphore is full for it.
    assert_eq!(children(&client, leases).await.len(), PERMITS as usize);
    g.release().await.expect("release");
    assert_eq!(children(&client, leases).await, full);
}

/// A read-write lock is Curator's `InterProcessReadWriteLock` at
/// `/rwlocks/<name>`: a Curator writer (`__WRIT__`) makes distlock's
/// readers and writers wait; a Curator reader (`__READ__`) makes
/// distlock's writer wait while distlock's readers share with it; and
/// distlock's nodes are named as Curator names them, in one sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_shares_with_curator_readers_and_writers() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let (a, b) = (
        locker(&zk.url(&chroot, "")).await,
        locker(&zk.url(&chroot, "")).await,
    );
    let client = plain(zk, &chroot).await;
    let parent = "/rwlocks/rw-interop";
    let side = |wait| opts(TTL, wait);
    let waiting = |l: &Locker, kind| {
        let (l, options) = (l.clone(), side(PATIENCE));
        tokio::spawn(async move { l.lock_kind("rw-interop", kind, options).await })
    };

    let writer = curator_node(&client, parent, "__WRIT__").await;
    let reader = waiting(&a, LockKind::Read);
    wait_for_children(&client, parent, 2).await;
    sleep(Duration::from_millis(300)).await;
    assert!(
        !reader.is_finished(),
        "a distlock reader got in beside a Curator writer"
    );
    assert!(
        b.rwlock("rw-interop")
            .try_write()
            .await
            .is_err_and(|e| e.is_busy()),
        "a distlock writer got in beside a Curator writer"
    );
    client
        .delete(&format!("{parent}/{writer}"), None)
        .await
        .expect("the Curator writer lets go");
    let r = timeout(Duration::from_secs(10), reader)
        .await
        .expect("the reader gets in once the Curator writer is gone")
        .expect("task")
        .expect("read lock");
    let nodes = children(&client, parent).await;
    let read = named_by_curator(&nodes, r.lease().owner(), "__READ__");
    assert_eq!(
        r.token().get(),
        czxid(&client, &format!("{parent}/{read}")).await,
        "the fencing token is the node's czxid"
    );
    r.release().await.expect("release");

    let reader = curator_node(&client, parent, "__READ__").await;
    let shared = a
        .lock_kind("rw-interop", LockKind::Read, side(Wait::No))
        .await
        .expect("a distlock reader shares with a Curator reader");
    let writer = waiting(&b, LockKind::Write);
    wait_for_children(&client, parent, 3).await;
    assert!(
        b.rwlock("rw-interop")
            .try_read()
            .await
            .is_err_and(|e| e.is_busy()),
        "a reader got in before a waiting writer (Curator's rule: no write node before a reader)"
    );
    shared.release().await.expect("release");
    sleep(Duration::from_millis(300)).await;
    assert!(
        !writer.is_finished(),
        "a distlock writer got in beside a Curator reader"
    );
    client
        .delete(&format!("{parent}/{reader}"), None)
        .await
        .expect("the Curator reader lets go");
    let w = timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer gets in once the Curator reader is gone")
        .expect("task")
        .expect("write lock");
    let nodes = children(&client, parent).await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let write = named_by_curator(&nodes, w.lease().owner(), "__WRIT__");
    assert!(
        write[write.len() - 10..] > read[read.len() - 10..],
        "readers and writers share one sequence"
    );
    assert_eq!(
        w.token().get(),
        czxid(&client, &format!("{parent}/{write}")).await
    );
    w.release().await.expect("release");
    assert!(children(&client, parent).await.is_empty());
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

/// A semaphore waiter or a reader whose acquire is dropped while it waits
/// leaves none of its nodes (the lease and the semaphore's mutex, the read
/// node), and the semaphore's mutex is free for the next acquirer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waits_for_permits_and_read_locks_leave_no_node() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let url = zk.url(&chroot, "");
    let (a, b) = (locker(&url).await, locker(&url).await);
    let client = plain(zk, &chroot).await;
    let (mutex, leases) = ("/semaphores/drop/locks", "/semaphores/drop/leases");
    let permit = |wait| opts(TTL, wait);
    let held = a
        .lock_kind("drop", LockKind::permit(1), permit(Wait::No))
        .await
        .expect("free");
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            b.lock_kind("drop", LockKind::permit(1), permit(Wait::Forever))
                .await
        })
    };
    wait_for_children(&client, leases, 2).await;
    wait_for_children(&client, mutex, 1).await;
    waiting.abort();
    wait_for_children(&client, leases, 1).await;
    wait_for_children(&client, mutex, 0).await;
    held.release().await.expect("release");
    let next = b
        .lock_kind(
            "drop",
            LockKind::permit(1),
            permit(Wait::For(Duration::from_secs(5))),
        )
        .await
        .expect("the semaphore's mutex was let go");
    next.release().await.expect("release");

    let parent = "/rwlocks/drop";
    let writer = a
        .lock_kind("drop", LockKind::Write, opts(TTL, Wait::No))
        .await
        .expect("free");
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move {
            b.lock_kind("drop", LockKind::Read, opts(TTL, Wait::Forever))
                .await
        })
    };
    wait_for_children(&client, parent, 2).await;
    waiting.abort();
    wait_for_children(&client, parent, 1).await;
    writer.release().await.expect("release");
    assert!(children(&client, parent).await.is_empty());
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

    let mut config = ZkConfig::from_url(&url).expect("url");
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

/// The parents of semaphores and read-write locks go too once empty: the
/// server deletes them as container nodes, or distlock does, up to the
/// family's root, where the server has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_semaphore_and_read_write_parents_do_not_pile_up() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let url = zk.url(&chroot, "");
    let client = plain(zk, &chroot).await;
    let mut config = ZkConfig::from_url(&url).expect("url");
    config.container_parents = false;
    let plain_parents = Locker::new(ZkBackend::connect_with(config).await.expect("connect"));
    for (l, containers) in [(locker(&url).await, true), (plain_parents, false)] {
        for (first, second) in [
            (LockKind::permit(1), LockKind::permit(1)),
            (LockKind::Read, LockKind::Write),
        ] {
            let g = l
                .lock_kind("tidy", first, opts(TTL, Wait::No))
                .await
                .expect("free");
            let _ = l
                .lock_kind(
                    "tidy",
                    second,
                    opts(TTL, Wait::For(Duration::from_millis(50))),
                )
                .await
                .expect_err("held");
            g.release().await.expect("release");
        }
        for root in ["/semaphores", "/rwlocks"] {
            if containers {
                timeout(Duration::from_secs(20), async {
                    while !children(&client, root).await.is_empty() {
                        sleep(Duration::from_millis(100)).await;
                    }
                })
                .await
                .expect("the server deletes empty container parents");
            } else {
                assert!(
                    children(&client, root).await.is_empty(),
                    "the releases deleted the empty parents under {root}"
                );
            }
        }
    }
}

/// The fencing token is the czxid, not the sequence number: when the parent
/// is deleted and made again, sequence numbers start over at zero but
/// tokens keep growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn czxid_tokens_keep_growing_when_the_parent_is_recreated() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let mut config = ZkConfig::from_url(&zk.url(&chroot, "")).expect("url");
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
        also_alice.try_lock("acl").await.is_err_and(|e| e.is_busy()),
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
