//! Redlock's cleanups on a master that lost its script cache (`SCRIPT
//! FLUSH`, as a restart does) and answers slowly: a released or abandoned
//! read-write grant, and a refused writer's waiting mark, must be removed
//! there too. A script run by its hash would first fail with `NOSCRIPT`
//! there and need two more round trips, which the per-node limit cuts off;
//! each cleanup must be one command.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::proxy::Proxy;
use conformance_tests::servers::redis::RedisSet;
use conformance_tests::targets::fresh_table;
use lock_core::backend::{AcquireRequest, LockBackend};
use lock_core::{LockKind, LockName};
use tokio::time::Instant;

/// The TTL of every request: its tenth, 2 s, is the per-node limit (the
/// `timeout` too).
const TTL: Duration = Duration::from_secs(20);
/// How late the slow master answers: one round trip fits in the per-node
/// limit, with room for a busy machine; two do not.
const SLOW: Duration = Duration::from_millis(1_200);

/// Three masters, the third reached through a proxy that can slow it.
struct SlowMaster {
    set: RedisSet,
    proxy: Proxy,
    backend: Arc<dyn LockBackend>,
    prefix: String,
}

impl SlowMaster {
    async fn start() -> Self {
        let set = RedisSet::start(3).await;
        let proxy = Proxy::start(set.nodes[2].port()).await;
        let prefix = format!("{}:", fresh_table());
        let url = format!(
            "redlock://{},{},{}?prefix={prefix}&timeout=2s",
            set.nodes[0].redlock_host(),
            set.nodes[1].redlock_host(),
            set.nodes[2].redlock_host_via(proxy.port()),
        );
        let backend = distlock::connect_backend(&url).await.expect("connect");
        Self {
            set,
            proxy,
            backend,
            prefix,
        }
    }

    /// Whether the slow master has `req`'s owner in the member set `set`
    /// (`""` the readers, `#writers`, `#writers-waiting`) of `req`'s
    /// read-write lock.
    fn has(&self, set: &str, req: &AcquireRequest) -> bool {
        let key = format!("{}{}#rw{set}", self.prefix, req.name);
        let members = self.set.nodes[2]
            .cli(&["ZRANGE", &key, "0", "-1"])
            .expect("redis-cli");
        members.lines().any(|m| m.trim() == req.owner.to_hex())
    }

    /// Runs `cleanup` with the slow master's script cache flushed and its
    /// replies `SLOW`.
    async fn without_scripts_slowly<T>(&self, what: &str, cleanup: impl Future<Output = T>) -> T {
        self.set.nodes[2]
            .cli(&["SCRIPT", "FLUSH"])
            .expect("SCRIPT FLUSH");
        self.proxy.set_reply_delay(SLOW);
        let started = Instant::now();
        let outcome = cleanup.await;
        eprintln!("{what}: {:?}", started.elapsed());
        self.proxy.set_reply_delay(Duration::ZERO);
        outcome
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_cleanups_reach_a_slow_master_that_lost_its_scripts() {
    let slow = SlowMaster::start().await;
    let b = &slow.backend;
    let name = |n: &str| LockName::new(n).expect("name");
    // One name per case, so that what one case leaves cannot fail another.
    let mut left = Vec::new();

    for (kind, set) in [(LockKind::Read, ""), (LockKind::Write, "#writers")] {
        let req = AcquireRequest::new(name(&format!("{kind:?}")), TTL).with_kind(kind);
        let lease = b.try_acquire(&req).await.expect("acquire").expect("free");
        assert!(slow.has(set, &req), "{kind:?}: granted on the slow master");
        slow.without_scripts_slowly("release", b.release(&lease))
            .await
            .expect("released on a majority");
        if slow.has(set, &req) {
            left.push(format!("a released {kind:?} grant"));
        }
    }

    let reader = AcquireRequest::new(name("waited"), TTL).with_kind(LockKind::Read);
    b.try_acquire(&reader)
        .await
        .expect("acquire")
        .expect("free");
    let writer = AcquireRequest::new(name("waited"), TTL).with_kind(LockKind::Write);
    assert!(
        b.try_acquire(&writer).await.expect("acquire").is_none(),
        "a reader holds"
    );
    assert!(
        slow.has("#writers-waiting", &writer),
        "the refused writer is marked as waiting on the slow master"
    );
    slow.without_scripts_slowly("abandon", b.abandon(&writer))
        .await
        .expect("abandon");
    if slow.has("#writers-waiting", &writer) {
        left.push("an abandoned writer's waiting mark".into());
    }
    slow.without_scripts_slowly("abandon", b.abandon(&reader))
        .await
        .expect("abandon");
    if slow.has("", &reader) {
        left.push("an abandoned reader's grant".into());
    }
    assert!(
        left.is_empty(),
        "left on the slow master after the cleanup: {left:?}"
    );
}
