//! The fault suite on memcached: every row of lock-memcache's `Under
//! faults` table, run and held to its claim, on a dedicated server (the
//! suite kills and pauses it) with a fresh key prefix per row.

use std::time::Duration;

use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::memcached::Memcached;
use conformance_tests::targets::fresh_table;
use conformance_tests::torture::{NetworkFault, ServerKill, ServerPause, claims, hold_to_claim};
use distlock_torture::{Nemesis, PauseHolder};

const README: &str = include_str!("../../lock-memcache/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

/// memcache's shortest TTL (`Capabilities::min_ttl`): expiry is counted in
/// whole seconds, and the lease is taken a second early.
const TTL: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcache_keeps_its_claims_under_faults() {
    let server = Memcached::start().await;
    let proxy = Proxy::start(server.port()).await;
    for claim in claims(README, "Under faults") {
        let query = format!("prefix={}:", fresh_table());
        let direct = server.url(&query);
        let proxied = server.url_via(proxy.port(), &query);
        let process = server.process();
        let (mut nemesis, url): (Box<dyn Nemesis + '_>, &str) = match claim.fault.as_str() {
            "pause-holder" => (Box::<PauseHolder>::default(), &direct),
            // memcached keeps nothing: it comes back empty.
            "server-kill" => (
                Box::new(ServerKill {
                    label: "server-kill",
                    server: process,
                }),
                &direct,
            ),
            "server-pause" => (
                Box::new(ServerPause {
                    label: "server-pause",
                    server: process,
                }),
                &direct,
            ),
            "net-stall" => (
                Box::new(NetworkFault {
                    label: "net-stall",
                    proxies: std::slice::from_ref(&proxy),
                    fault: Fault::Stall,
                }),
                &proxied,
            ),
            "net-drop-reply" => (
                Box::new(NetworkFault {
                    label: "net-drop-reply",
                    proxies: std::slice::from_ref(&proxy),
                    fault: Fault::DropNextReply,
                }),
                &proxied,
            ),
            other => panic!("no nemesis for the README's fault {other:?}"),
        };
        let outcome = hold_to_claim(WORKER, "memcache", url, TTL, &claim, nemesis.as_mut()).await;
        eprintln!("memcache × {}: {:?}", claim.fault, outcome.figures);
        if claim.fault == "net-drop-reply" {
            assert!(
                proxy.cuts() > 0,
                "memcache × net-drop-reply: no reply was dropped"
            );
        }
    }
}
