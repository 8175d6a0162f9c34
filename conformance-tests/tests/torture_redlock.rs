//! The fault suite on Redlock over five independent masters: every row of
//! lock-redlock's `Under faults` table, run and held to its claim.

use std::time::Duration;

use conformance_tests::servers::redis::{Redis, RedisSet};
use conformance_tests::torture::{claims, hold_to_claim};
use distlock_torture::{Nemesis, PauseHolder, Run};
use lock_core::backend::async_trait;

const README: &str = include_str!("../../lock-redlock/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

/// The run's lock key on every master (the default prefix, then the name).
fn lock_key(run: &Run) -> String {
    format!("distlock:{}", run.plan().name)
}

/// A master that has the lock key now, once a worker holds the lock: one
/// of the holder's, chosen at random; any master if none has it.
async fn holders_master<'a>(run: &Run, set: &'a RedisSet) -> &'a Redis {
    run.holder().await;
    let key = lock_key(run);
    let with_key: Vec<&Redis> = set
        .nodes
        .iter()
        .filter(|n| n.cli(&["EXISTS", &key]).is_some_and(|o| o.trim() == "1"))
        .collect();
    match with_key.len() {
        0 => &set.nodes[rand::random_range(0..set.nodes.len())],
        n => with_key[rand::random_range(0..n)],
    }
}

/// kill -9 of `count` masters (the first ones) for the fault, restarted
/// without their keys at heal.
struct KillMasters<'a> {
    label: &'static str,
    set: &'a RedisSet,
    count: usize,
}

#[async_trait]
impl Nemesis for KillMasters<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        for node in &self.set.nodes[..self.count] {
            node.process().kill();
        }
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        for node in &self.set.nodes[..self.count] {
            node.process().restart();
        }
        Ok(())
    }
}

/// kill -9 of one master that has the held lock's key; restarted (empty,
/// no persistence) at once, or only at heal — after the TTL, as the
/// README's delayed-restart rule asks.
struct KillHoldersMaster<'a> {
    label: &'static str,
    set: &'a RedisSet,
    at_once: bool,
    killed: Option<&'a Redis>,
}

#[async_trait]
impl Nemesis for KillHoldersMaster<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        let master = holders_master(run, self.set).await;
        master.process().kill();
        if self.at_once {
            master.process().restart();
        } else {
            self.killed = Some(master);
        }
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        if let Some(master) = self.killed.take() {
            master.process().restart();
        }
        Ok(())
    }
}

/// Kleppmann's clock jump, by its effect: one master's clock leaps ahead,
/// and the held lock's key expires there early (`PEXPIRE key 1` on that
/// master alone). Debian's `redis-server` cannot be run under faketime,
/// so the jump itself is not simulated.
struct ClockJump<'a> {
    set: &'a RedisSet,
}

#[async_trait]
impl Nemesis for ClockJump<'_> {
    fn label(&self) -> String {
        "clock-jump".into()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        let master = holders_master(run, self.set).await;
        master.cli(&["PEXPIRE", &lock_key(run), "1"]);
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_keeps_its_claims_under_faults() {
    // Five independent masters without persistence, for this file alone.
    let set = RedisSet::start(5).await;
    let url = set.url("");
    let ttl = Duration::from_millis(500);
    for claim in claims(README, "Under faults") {
        let mut nemesis: Box<dyn Nemesis + '_> = match claim.fault.as_str() {
            "pause-holder" => Box::<PauseHolder>::default(),
            "minority-kill" => Box::new(KillMasters {
                label: "minority-kill",
                set: &set,
                count: 2,
            }),
            "majority-kill" => Box::new(KillMasters {
                label: "majority-kill",
                set: &set,
                count: 3,
            }),
            "restart-now" => Box::new(KillHoldersMaster {
                label: "restart-now",
                set: &set,
                at_once: true,
                killed: None,
            }),
            "restart-delayed" => Box::new(KillHoldersMaster {
                label: "restart-delayed",
                set: &set,
                at_once: false,
                killed: None,
            }),
            "clock-jump" => Box::new(ClockJump { set: &set }),
            other => panic!("no nemesis for the README's fault {other:?}"),
        };
        let outcome = hold_to_claim(WORKER, "redlock", &url, ttl, &claim, nemesis.as_mut()).await;
        eprintln!("redlock × {}: {:?}", claim.fault, outcome.figures);
    }
}
