//! The fault suite on one Redis server: every row of lock-redis's `Under
//! faults` table, run and held to its claim.

use std::time::Duration;

use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::Supervised;
use conformance_tests::servers::redis::Redis;
use conformance_tests::torture::{NetworkFault, ServerPause, hold_to_claim, rows};
use distlock_torture::{Nemesis, PauseHolder, Run};
use lock_core::backend::async_trait;

const README: &str = include_str!("../../lock-redis/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

/// kill -9 of the server while a worker holds the lock, and a restart at
/// once, as a supervisor (systemd, a container runtime) would do it: the
/// server comes back within the holder's lease, with whatever its
/// persistence kept.
struct KillRestartNow<'a> {
    label: &'static str,
    server: &'a Supervised,
}

#[async_trait]
impl Nemesis for KillRestartNow<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        run.holder().await;
        self.server.kill();
        self.server.restart();
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_its_claims_under_faults() {
    // No persistence, as the harness starts every server; the workers reach
    // it through a proxy, for the network faults.
    let server = Redis::start().await;
    let proxy = Proxy::start(server.port()).await;
    let url = server.url_via(proxy.port(), "");
    // Every write in the append-only file, fsynced before the reply.
    let aof = Redis::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).await;
    let aof_url = aof.url("");
    let ttl = Duration::from_millis(500);
    for row in rows(README, "Under faults") {
        let (url, mut nemesis): (&str, Box<dyn Nemesis + '_>) = match row.fault.as_str() {
            "pause-holder" => (&url, Box::<PauseHolder>::default()),
            "server-kill" => (
                &url,
                Box::new(KillRestartNow {
                    label: "server-kill",
                    server: server.process(),
                }),
            ),
            "server-kill-aof" => (
                &aof_url,
                Box::new(KillRestartNow {
                    label: "server-kill-aof",
                    server: aof.process(),
                }),
            ),
            "server-pause" => (
                &url,
                Box::new(ServerPause {
                    label: "server-pause",
                    server: server.process(),
                }),
            ),
            "net-stall" => (
                &url,
                Box::new(NetworkFault {
                    label: "net-stall",
                    proxies: std::slice::from_ref(&proxy),
                    fault: Fault::Stall,
                }),
            ),
            "net-drop-reply" => (
                &url,
                Box::new(NetworkFault {
                    label: "net-drop-reply",
                    proxies: std::slice::from_ref(&proxy),
                    fault: Fault::DropNextReply,
                }),
            ),
            other => panic!("no nemesis for the README's fault {other:?}"),
        };
        hold_to_claim(WORKER, "redis", url, ttl, &row, nemesis.as_mut()).await;
    }
}
