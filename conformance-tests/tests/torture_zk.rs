//! The fault suite on ZooKeeper: every row of lock-zk's `Under faults`
//! table, run and held to its claim, on servers of its own (a standalone
//! server, a proxy in front of it, and, for `leader-kill`, a three-server
//! ensemble).

use std::time::Duration;

use conformance_tests::proxy::Proxy;
use conformance_tests::servers::zookeeper::{ZkServer, ZooKeeper};
use conformance_tests::torture::{LeaderKill, Route, hold_to_claim, recovering_nemesis, rows};

const README: &str = include_str!("../../lock-zk/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

const TTL: Duration = Duration::from_millis(500);

/// The longest a kill waits for the lock to be granted again after the
/// last restart.
const PATIENCE: Duration = Duration::from_secs(10);

/// The workers' session: long enough for a 500 ms lease (two thirds of it),
/// shorter than a fault (two TTLs), so that a paused or cut-off session
/// expires during the fault and the lock moves on.
const SESSION: &str = "session_timeout=750ms&timeout=500ms&connect_timeout=2s";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_keeps_its_claims_under_faults() {
    let one = ZooKeeper::start().await;
    let proxy = Proxy::start(one.servers[0].port()).await;
    let direct = one.url("torture", SESSION);
    let proxied = format!("zk://127.0.0.1:{}/torture?{SESSION}", proxy.port());
    let mut ensemble = None;
    for row in rows(README, "Under faults") {
        // A row may end with the server still starting again.
        one.wait_ready().await;
        let mut url = direct.clone();
        let server = one.servers[0].process();
        let leader = if row.fault == "leader-kill" {
            let cluster = match &ensemble {
                Some(cluster) => cluster,
                None => ensemble.insert(ZooKeeper::start_ensemble().await),
            };
            url = cluster.url("torture", SESSION);
            Some(LeaderKill::new(|| cluster.leader().map(ZkServer::process)))
        } else {
            None
        };
        let proxies = std::slice::from_ref(&proxy);
        let (mut nemesis, route) =
            recovering_nemesis(&row.fault, server, proxies, leader, PATIENCE)
                .unwrap_or_else(|| panic!("no nemesis for the README's fault {:?}", row.fault));
        if route == Route::Proxied {
            url.clone_from(&proxied);
        }
        hold_to_claim(WORKER, "zookeeper", &url, TTL, &row, nemesis.as_mut()).await;
    }
}
