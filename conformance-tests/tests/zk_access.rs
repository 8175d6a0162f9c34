//! ZooKeeper as a store shared by identities that must not touch each
//! other's locks: with `auth=digest:…`, every node distlock makes carries
//! the creator-only ACL, so another identity can neither renew, release,
//! delete nor read the owner of a held lock, and the holder keeps it.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use distlock::lock_zk::ZkBackend;
use lock_core::backend::LockBackend;
use lock_core::{AcquireOptions, LockName, LockState, Locker, Wait};
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
    let locker = Locker::from_arc(alice.clone() as Arc<dyn LockBackend>);
    let guard = locker
        .lock_with("shared", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect("free");
    let lease = guard.lease().clone();

    // Bob through distlock, in the same chroot.
    let bob = backend(&server.url(&chroot, "auth=digest:bob:bob-pw")).await;
    let name = LockName::new("shared").unwrap();
    let refused = |what: &str, e: lock_core::Error| {
        assert!(!e.is_retryable(), "{what}: a retry would not help: {e}");
        assert!(!e.to_string().contains("alice-pw"), "{what}: {e}");
    };
    match bob.holder(&name).await {
        Err(e) => refused("holder", e),
        Ok(seen) => panic!("bob read the holder: {seen:?}"),
    }
    match bob.renew(&lease, TTL).await {
        Err(e) => refused("renew", e),
        Ok(_) => panic!("bob renewed alice's lease"),
    }
    let _ = bob.release(&lease).await;
    let bobs = Locker::from_arc(bob.clone() as Arc<dyn LockBackend>);
    match bobs.try_lock("shared").await {
        Err(e) => refused("try_lock", e),
        Ok(got) => panic!("bob reached alice's lock: {:?}", got.map(|g| g.token())),
    }

    // Bob with a plain client: the nodes are there, and closed to him.
    let plain = zk::Client::connector()
        .with_auth("digest", b"bob:bob-pw")
        .connect(&format!("{}/{chroot}", server.connect_string()))
        .await
        .expect("connect as bob");
    for path in ["/locks", "/locks/shared"] {
        match plain.list_children(path).await {
            Err(zk::Error::NoAuth) => {}
            other => panic!("bob listed {path}: {other:?}"),
        }
    }
    let alices_plain = zk::Client::connector()
        .with_auth("digest", b"alice:alice-pw")
        .connect(&format!("{}/{chroot}", server.connect_string()))
        .await
        .expect("connect as alice");
    let nodes = alices_plain
        .list_children("/locks/shared")
        .await
        .expect("alice lists her queue");
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = format!("/locks/shared/{}", nodes[0]);
    match plain.get_data(&node).await {
        Err(zk::Error::NoAuth) => {}
        other => panic!("bob read the holder's node: {other:?}"),
    }
    match plain.delete(&node, None).await {
        Err(zk::Error::NoAuth) => {}
        other => panic!("bob deleted the holder's node: {other:?}"),
    }

    // Alice still holds it, as the server sees it.
    assert_eq!(guard.state(), LockState::Held);
    assert!(
        alice.is_held(&lease).await.expect("is_held"),
        "alice lost her lock"
    );
    assert!(guard.is_held().await.expect("is_held"));
    guard.release().await.expect("alice releases");
}
