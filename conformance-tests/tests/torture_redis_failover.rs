//! The fault suite on Redis Sentinel and Redis Cluster: every row of
//! lock-redis's `Under faults: Sentinel` and `Under faults: Cluster`
//! tables, run and held to its claim, each topology its own.
//!
//! A failover takes seconds — the sentinels call a master down after 2 s,
//! a cluster after its 2 s node timeout — so these rows run longer than a
//! few TTLs: long enough for one failover and for grants on the promoted
//! replica after it.

use std::time::Duration;

use conformance_tests::servers::redis::Redis;
use conformance_tests::servers::redis_cluster::RedisCluster;
use conformance_tests::servers::redis_sentinel::RedisSentinel;
use conformance_tests::targets::fresh_table;
use conformance_tests::torture::{Row, duration, hold_to_claim_for, rows};
use distlock_torture::{Nemesis, Run};
use lock_core::backend::async_trait;

const README: &str = include_str!("../../lock-redis/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

const TTL: Duration = Duration::from_millis(500);

/// The shortest row: a quiet TTL, the failover (some 4 s from the kill to
/// a master that serves), the old master back, and a few seconds of
/// grants after.
const AT_LEAST: Duration = Duration::from_secs(10);

/// The master killed while a worker holds, with the replica's link held
/// from a TTL before (what the master grants then never reaches the
/// replica, which the sentinels promote); the old master restarted and the
/// link let go once they have, and healed once the old master is the new
/// one's replica, in sync.
struct SentinelFailover<'a> {
    label: String,
    sentinel: &'a RedisSentinel,
    killed: Option<&'a Redis>,
}

#[async_trait]
impl Nemesis for SentinelFailover<'_> {
    fn label(&self) -> String {
        self.label.clone()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        // The last strike's old master may still be rejoining.
        self.sentinel.wait_ready().await;
        run.holder().await;
        self.sentinel.hold_replication().await;
        tokio::time::sleep(run.plan().ttl).await;
        self.killed = Some(self.sentinel.kill_master().await);
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        if let Some(old) = self.killed.take() {
            let promoted = self.sentinel.wait_for_failover(old).await;
            old.process().restart();
            give_credentials(promoted, old).await?;
            self.sentinel.resume_replication();
            // Healed once the old master serves as the promoted one's
            // replica again: until then a `WAIT` for a replica can confirm
            // no grant, and the probe after the last strike, which waits
            // no longer than a few TTLs, would find the lock unavailable
            // while the sentinels were still reconfiguring it.
            self.sentinel.wait_ready().await;
        }
        Ok(())
    }
}

/// Gives `old`, a master restarted without the credentials a replica logs
/// in to its master with, those of `promoted`, which was started as a
/// replica: the sentinels are about to make `old` a replica of it.
async fn give_credentials(promoted: &Redis, old: &Redis) -> std::io::Result<()> {
    for key in ["masteruser", "masterauth"] {
        let value = promoted
            .cli(&["CONFIG", "GET", key])
            .and_then(|answer| answer.lines().nth(1).map(str::to_owned))
            .ok_or_else(|| std::io::Error::other(format!("the promoted replica has no {key}")))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while old
            .cli(&["CONFIG", "SET", key, &value])
            .is_none_or(|answer| answer.trim() != "OK")
        {
            if tokio::time::Instant::now() >= deadline {
                return Err(std::io::Error::other("the old master did not come back"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// The master of the run's slot (every lock of the name is on it) killed
/// while a worker holds; restarted, to rejoin as a replica, once its
/// replica serves the slot.
struct ClusterFailover<'a> {
    cluster: &'a RedisCluster,
    killed: Option<(u16, &'a Redis)>,
}

#[async_trait]
impl Nemesis for ClusterFailover<'_> {
    fn label(&self) -> String {
        "failover".into()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        self.cluster.wait_ready().await;
        run.holder().await;
        let slot = RedisCluster::slot_of(format!("{{{}}}", run.plan().name));
        self.killed = Some((slot, self.cluster.kill_master_of_slot(slot).await));
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        if let Some((slot, old)) = self.killed.take() {
            self.cluster.wait_for_failover(slot).await;
            old.process().restart();
        }
        Ok(())
    }
}

/// Runs one README row on `url` under `nemesis`, long enough for a
/// failover, and holds it to its claim.
async fn hold_row(label: &str, url: &str, row: &Row, nemesis: &mut dyn Nemesis) {
    let length = duration(TTL).max(AT_LEAST);
    hold_to_claim_for(WORKER, label, url, TTL, length, row, nemesis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_keeps_its_claims_under_failover() {
    let sentinel = RedisSentinel::start().await;
    for row in rows(README, "Under faults: Sentinel") {
        let wait = match row.fault.as_str() {
            "failover" => "",
            "failover-wait" => "&wait_replicas=1&wait_timeout=300ms",
            other => panic!("no nemesis for the README's fault {other:?}"),
        };
        let url = sentinel.url(&format!("prefix={}:&timeout=500ms{wait}", fresh_table()));
        let mut nemesis = SentinelFailover {
            label: row.fault.clone(),
            sentinel: &sentinel,
            killed: None,
        };
        hold_row("redis-sentinel", &url, &row, &mut nemesis).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_keeps_its_claims_under_failover() {
    let cluster = RedisCluster::start().await;
    for row in rows(README, "Under faults: Cluster") {
        assert_eq!(row.fault, "failover", "no nemesis for the README's fault");
        let url = cluster.url(&format!("prefix={}:&timeout=500ms", fresh_table()));
        let mut nemesis = ClusterFailover {
            cluster: &cluster,
            killed: None,
        };
        hold_row("redis-cluster", &url, &row, &mut nemesis).await;
    }
}
