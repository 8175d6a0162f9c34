//! The fault suite on Redlock over five independent masters: every row of
//! lock-redlock's `Under faults` table, run and held to its claim.

use std::time::Duration;

use conformance_tests::servers::redis::{Redis, RedisSet};
use conformance_tests::torture::{hold_to_claim, rows};
use distlock_torture::{Lock, Nemesis, PauseHolder, Run};
use lock_core::backend::async_trait;

const README: &str = include_str!("../../lock-redlock/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

/// The keys on every master that say who holds `lock` (the default
/// prefix, then the name): the mutex's key, the read-write lock's readers
/// and writer (lock-redis's group layout), or the election's leader key.
fn holder_keys(run: &Run, lock: Lock) -> Vec<String> {
    let base = format!("distlock:{}", run.plan().name);
    match lock {
        Lock::ReadWrite => vec![format!("{base}#rw"), format!("{base}#rw#writers")],
        Lock::Election => vec![format!("{base}#elect")],
        _ => vec![base],
    }
}

/// A master that has `lock`'s holder keys now, once a worker holds it: one
/// of the holder's, chosen at random; any master if none has them.
async fn holders_master<'a>(run: &Run, set: &'a RedisSet, lock: Lock) -> &'a Redis {
    run.holder_of(lock).await;
    let keys = holder_keys(run, lock);
    let mut exists = vec!["EXISTS"];
    exists.extend(keys.iter().map(String::as_str));
    let with_key: Vec<&Redis> = set
        .nodes
        .iter()
        .filter(|n| n.cli(&exists).is_some_and(|o| o.trim() != "0"))
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

/// kill -9 of one master that has the held mutex's key; restarted (empty,
/// no persistence) at once, or only at heal — after the TTL, as the
/// README's delayed-restart rule asks. The read-write lock's holders lose
/// that master too, whatever they had on it.
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
        let master = holders_master(run, self.set, Lock::Mutex).await;
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
/// and each held lock's keys expire there early (`PEXPIRE key 1` on that
/// master alone: a master of the mutex's holder, and one of the read-write
/// lock's holders, whose readers and writer all go with the leap).
/// Debian's `redis-server` cannot be run under faketime, so the jump
/// itself is not simulated.
struct ClockJump<'a> {
    set: &'a RedisSet,
}

#[async_trait]
impl Nemesis for ClockJump<'_> {
    fn label(&self) -> String {
        "clock-jump".into()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        for lock in run.locks() {
            let master = holders_master(run, self.set, lock).await;
            for key in holder_keys(run, lock) {
                master.cli(&["PEXPIRE", &key, "1"]);
            }
        }
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
    for row in rows(README, "Under faults") {
        let mut nemesis: Box<dyn Nemesis + '_> = match row.fault.as_str() {
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
        hold_to_claim(WORKER, "redlock", &url, ttl, &row, nemesis.as_mut()).await;
    }
}
