//! The fault suite on etcd: every row of lock-etcd's `Under faults` table,
//! run and held to its claim, on servers of its own (a one-member cluster,
//! a proxy in front of it, and, for `leader-kill`, a three-member cluster).

use std::time::Duration;

use conformance_tests::proxy::Proxy;
use conformance_tests::servers::etcd::{Etcd, EtcdMember};
use conformance_tests::torture::{LeaderKill, Route, hold_to_claim, recovering_nemesis, rows};

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
    for row in rows(README, "Under faults") {
        // A row may end with the server still starting again.
        one.wait_ready().await;
        let mut url = direct.clone();
        let server = one.members[0].process();
        let leader = if row.fault == "leader-kill" {
            let cluster = match &cluster {
                Some(cluster) => cluster,
                None => cluster.insert(Etcd::start_cluster().await),
            };
            url = cluster.url("torture", "");
            Some(LeaderKill::new(|| {
                cluster.leader().map(EtcdMember::process)
            }))
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
        hold_to_claim(WORKER, "etcd", &url, TTL, &row, nemesis.as_mut()).await;
    }
}

fn port(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("host:port")
}
