//! What both ZooKeeper test binaries use: clients of distlock's backend,
//! plain ZooKeeper clients to look at its nodes, and waiting for a queue.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::servers::zookeeper::ZooKeeper;
use distlock::backends::zk::ZkBackend;
use lock_core::{AcquireOptions, Locker, Wait};
use tokio::time::{sleep, timeout};
use zookeeper_client as zk;

pub(crate) const TTL: Duration = Duration::from_secs(10);

pub(crate) fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}

pub(crate) async fn backend(url: &str) -> Arc<ZkBackend> {
    Arc::new(ZkBackend::connect(url).await.expect("connect"))
}

pub(crate) async fn locker(url: &str) -> Locker {
    Locker::from_arc(backend(url).await)
}

/// A plain ZooKeeper client inside `chroot` (which must exist), to look at
/// the nodes distlock makes. Its session asks for a long timeout, so that
/// it pings rarely (a test counting requests counts its pings).
pub(crate) async fn plain(zk: &ZooKeeper, chroot: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&format!("{}/{chroot}", zk.connect_string()))
        .await
        .expect("connect a plain client")
}

pub(crate) async fn children(client: &zk::Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(mut c) => {
            c.sort();
            c
        }
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

pub(crate) async fn wait_for_children(
    client: &zk::Client,
    path: &str,
    count: usize,
) -> Vec<String> {
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
