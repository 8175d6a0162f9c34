//! The fault suite on etcd: every row of lock-etcd's `Under faults` table,
//! run and held to its claim, on servers of its own (a one-member cluster,
//! a proxy in front of it, and, for `leader-kill`, a three-member cluster).

use std::time::Duration;

use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::etcd::{Etcd, EtcdMember};
use conformance_tests::torture::recovered::Recovered;
use conformance_tests::torture::{
    LeaderKill, NetworkFault, ServerKill, ServerPause, claims, hold_to_claim,
};
use distlock_torture::{Nemesis, PauseHolder};

const README: &str = include_str!("../../lock-etcd/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

/// etcd's smallest lease (`MIN_TTL`).
const TTL: Duration = Duration::from_secs(2);

/// The longest a kill waits for the lock to be granted again after the
/// last restart.
const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keeps_its_claims_under_faults() {
    let one = Etcd::start().await;
    let proxy = Proxy::start(port(&one.members[0].client_addr)).await;
    let direct = format!("etcd://{}/torture", one.members[0].client_addr);
    let proxied = format!("etcd://127.0.0.1:{}/torture", proxy.port());
    let mut cluster = None;
    for claim in claims(README, "Under faults") {
        // A row may end with the server still starting again.
        one.wait_ready().await;
        let mut url = direct.clone();
        let mut nemesis: Box<dyn Nemesis> = match claim.fault.as_str() {
            "pause-holder" => Box::<PauseHolder>::default(),
            "server-kill" => Box::new(Recovered {
                nemesis: ServerKill {
                    label: "server-kill",
                    server: one.members[0].process(),
                },
                patience: PATIENCE,
            }),
            "server-pause" => Box::new(ServerPause {
                label: "server-pause",
                server: one.members[0].process(),
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
                if cluster.is_none() {
                    cluster = Some(Etcd::start_cluster().await);
                }
                let etcd = cluster.as_ref().expect("started");
                url = etcd.url("torture", "");
                Box::new(Recovered {
                    nemesis: LeaderKill::new(|| etcd.leader().map(EtcdMember::process)),
                    patience: PATIENCE,
                })
            }
            other => panic!("no nemesis for the README's fault {other:?}"),
        };
        let outcome = hold_to_claim(WORKER, "etcd", &url, TTL, &claim, nemesis.as_mut()).await;
        eprintln!("etcd × {}: {:?}", claim.fault, outcome.figures);
    }
}

fn port(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("host:port")
}
