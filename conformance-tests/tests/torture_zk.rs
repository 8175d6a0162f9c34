//! The fault suite on ZooKeeper: every row of lock-zk's `Under faults`
//! table, run and held to its claim, on servers of its own (a standalone
//! server, a proxy in front of it, and, for `leader-kill`, a three-server
//! ensemble).

use std::time::Duration;

use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::zookeeper::{ZkServer, ZooKeeper};
use conformance_tests::torture::recovered::Recovered;
use conformance_tests::torture::{
    LeaderKill, NetworkFault, ServerKill, ServerPause, claims, hold_to_claim,
};
use distlock_torture::{Nemesis, PauseHolder};

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
    for claim in claims(README, "Under faults") {
        // A row may end with the server still starting again.
        one.wait_ready().await;
        let mut url = direct.clone();
        let mut nemesis: Box<dyn Nemesis> = match claim.fault.as_str() {
            "pause-holder" => Box::<PauseHolder>::default(),
            "server-kill" => Box::new(Recovered {
                nemesis: ServerKill {
                    label: "server-kill",
                    server: one.servers[0].process(),
                },
                patience: PATIENCE,
            }),
            "server-pause" => Box::new(ServerPause {
                label: "server-pause",
                server: one.servers[0].process(),
            }),
            "net-stall" => {
                url.clone_from(&proxied);
                Box::new(NetworkFault {
                    label: "net-stall",
                    proxies: std::slice::from_ref(&proxy),
                    fault: Fault::Stall,
                })
            }
            "leader-kill" => {
                if ensemble.is_none() {
                    ensemble = Some(ZooKeeper::start_ensemble().await);
                }
                let zk = ensemble.as_ref().expect("started");
                url = zk.url("torture", SESSION);
                Box::new(Recovered {
                    nemesis: LeaderKill::new(|| zk.leader().map(ZkServer::process)),
                    patience: PATIENCE,
                })
            }
            other => panic!("no nemesis for the README's fault {other:?}"),
        };
        let outcome = hold_to_claim(WORKER, "zookeeper", &url, TTL, &claim, nemesis.as_mut()).await;
        eprintln!("zookeeper × {}: {:?}", claim.fault, outcome.figures);
    }
}
