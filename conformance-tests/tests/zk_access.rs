//! ZooKeeper as a store shared by identities that must not touch each
//! other's locks: with `auth=digest:…`, every node distlock makes carries
//! the creator-only ACL, so another identity can neither renew, release,
//! delete nor read the owner of a held lock, and the holder keeps it.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::access::another_identity_is_refused;
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use distlock::backends::zk::ZkBackend;
use lock_core::{AcquireOptions, Locker, Wait};
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);

async fn backend(url: &str) -> Arc<ZkBackend> {
    Arc::new(ZkBackend::connect(url).await.expect("connect"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_identity_cannot_touch_a_held_lock() {
    let server = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let alice = backend(&server.url(&chroot, "auth=digest:alice:alice-pw")).await;
    let bob = backend(&server.url(&chroot, "auth=digest:bob:bob-pw")).await;
    another_identity_is_refused(alice.clone(), bob, &["alice-pw", "bob-pw"]).await;

    // By hand: the nodes are there, and closed to another identity.
    let locker = Locker::from_arc(alice);
    let guard = locker
        .lock_with("by-hand", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect("free");
    let connect = |auth: &'static [u8]| {
        let hosts = format!("{}/{chroot}", server.connect_string());
        async move {
            zk::Client::connector()
                .with_auth("digest", auth)
                .connect(&hosts)
                .await
                .expect("connect by hand")
        }
    };
    let (alices, bobs) = (
        connect(b"alice:alice-pw").await,
        connect(b"bob:bob-pw").await,
    );
    for path in ["/locks", "/locks/by-hand"] {
        match bobs.list_children(path).await {
            Err(zk::Error::NoAuth) => {}
            other => panic!("bob listed {path}: {other:?}"),
        }
    }
    let nodes = alices
        .list_children("/locks/by-hand")
        .await
        .expect("alice lists her queue");
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = format!("/locks/by-hand/{}", nodes[0]);
    match bobs.get_data(&node).await {
        Err(zk::Error::NoAuth) => {}
        other => panic!("bob read the holder's node: {other:?}"),
    }
    match bobs.delete(&node, None).await {
        Err(zk::Error::NoAuth) => {}
        other => panic!("bob deleted the holder's node: {other:?}"),
    }
    assert!(
        guard.is_held().await.expect("is_held"),
        "alice lost her lock"
    );
    guard.release().await.expect("alice releases");
}
