//! distlock on Redis Sentinel when the sentinels cannot be reached: the
//! commands that find no master connection share one look-up, and its
//! failure, instead of each waiting for the failed look-ups of those
//! before it. Starts a topology of its own (its master is killed).

mod common {
    pub(crate) mod bounded;
}

use std::time::Duration;

use common::bounded::{all_fail_within, at_once, eventually};
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::redis_sentinel::RedisSentinel;
use conformance_tests::targets::fresh_table;
use lock_core::{AcquireOptions, Locker, Wait};

/// The command timeout and the connect timeout the backend is given.
const TIMEOUT: Duration = Duration::from_millis(200);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);

const TTL: Duration = Duration::from_secs(10);

/// The master dies, then the sentinels are black-holed: ten `try_lock`s at
/// once each need a look-up of the master, and all fail within
/// 2 × (timeout + connect_timeout) — one shared failed look-up for the
/// attempts (the locker's undo of each runs in the background) — not one
/// after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_locks_share_one_failed_master_look_up() {
    let topology = RedisSentinel::start().await;
    let mut url = topology.url(&format!(
        "prefix={}:&timeout={}ms&connect_timeout={}ms",
        fresh_table(),
        TIMEOUT.as_millis(),
        CONNECT_TIMEOUT.as_millis()
    ));
    let mut proxies = Vec::new();
    for sentinel in topology.sentinels() {
        let proxy = Proxy::to(sentinel.socket_addr()).await;
        url = url.replacen(
            &sentinel.socket_addr().to_string(),
            &format!("127.0.0.1:{}", proxy.port()),
            1,
        );
        proxies.push(proxy);
    }
    // Timeouts this short may run out on a loaded machine: the setting up
    // tries again.
    let l = Locker::from_arc(eventually("connect", || distlock::connect_backend(&url)).await);
    let opts = AcquireOptions::with_ttl(TTL).wait(Wait::No);
    eventually("a lock through the sentinels' proxies", async || {
        l.lock_with("before", opts).await?.release().await
    })
    .await;

    // A command on the dead master's connection fails and drops it: the
    // next one asks the sentinels.
    topology.kill_master().await;
    let failed = l.lock_with("probe", opts).await;
    assert!(failed.is_err(), "a lock on a dead master: {failed:?}");

    for proxy in &proxies {
        proxy.set(Fault::Stall);
    }
    let tries = at_once(10, |i| {
        let l = l.clone();
        async move { l.lock_with(format!("try-{i}"), opts).await }
    });
    let bound = 2 * (TIMEOUT + CONNECT_TIMEOUT);
    let slowest = all_fail_within("try_lock", tries, bound).await;
    eprintln!("ten try_locks with the sentinels black-holed: the slowest took {slowest:?}");
}
