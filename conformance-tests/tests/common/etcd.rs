//! What both etcd test binaries use: the keys queued under one lock, as
//! etcdctl sees them.

use std::time::Duration;

use conformance_tests::servers::etcd::Etcd;
use tokio::time::{sleep, timeout};

/// Keys queued under one lock, as etcdctl sees them.
pub(crate) fn queued(etcd: &Etcd, dir: &str) -> usize {
    etcd.members[0]
        .ctl(&["get", "--prefix", dir, "--keys-only"])
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

pub(crate) async fn wait_for_queue(etcd: &Etcd, dir: &str, len: usize) {
    timeout(Duration::from_secs(20), async {
        while queued(etcd, dir) != len {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the queue under {dir} never reached {len}"));
}
