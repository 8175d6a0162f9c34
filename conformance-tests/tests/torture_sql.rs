//! The fault suite on PostgreSQL and MariaDB: every row of lock-sql's
//! `Under faults: PostgreSQL` and `Under faults: MariaDB` tables, run and
//! held to its claim, each server a dedicated one (the suite kills and
//! pauses it) and each row on a fresh table.
//!
//! PostgreSQL is a tree of processes: the postmaster, and one backend
//! process per connection that goes on serving its connection when only
//! the postmaster is stopped or killed. Its `server-kill` and
//! `server-pause` therefore act on the whole tree (the nemeses below);
//! MariaDB is one process, and the harness's generic nemeses do.

use std::time::Duration;

use conformance_tests::proxy::Proxy;
use conformance_tests::servers::mariadb::Mariadb;
use conformance_tests::servers::postgres::Postgres;
use conformance_tests::servers::{SqlInstance, SqlServer};
use conformance_tests::targets::fresh_table;
use conformance_tests::torture::{
    Route, assert_faults_applied, hold_to_claim, rows, shared_nemesis,
};
use distlock_torture::{Nemesis, Run};
use lock_core::backend::async_trait;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const README: &str = include_str!("../../lock-sql/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

/// PostgreSQL's smallest sensible lease for the suite; MariaDB's too.
const TTL: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_its_claims_under_faults() {
    let server = Postgres::start().await;
    every_row(&server, "Under faults: PostgreSQL", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_keeps_its_claims_under_faults() {
    let server = Mariadb::start().await;
    every_row(&server, "Under faults: MariaDB", false).await;
}

/// Runs every row of the README's section `heading` against `server`;
/// `tree` says the server is a tree of processes (PostgreSQL).
async fn every_row(server: &SqlInstance, heading: &str, tree: bool) {
    let proxy = Proxy::start(server.port()).await;
    let label = server.label();
    for row in rows(README, heading) {
        let query = format!("table={}", fresh_table());
        let direct = server.url(&query);
        let proxied = server.url_via(proxy.port(), &query);
        let (mut nemesis, route): (Box<dyn Nemesis + '_>, Route) = match row.fault.as_str() {
            "server-kill" if tree => (
                Box::new(TreeKill {
                    server,
                    stopped: Vec::new(),
                }),
                Route::Direct,
            ),
            "server-pause" if tree => (
                Box::new(TreePause {
                    server,
                    stopped: Vec::new(),
                }),
                Route::Direct,
            ),
            other => shared_nemesis(other, server.process(), std::slice::from_ref(&proxy))
                .unwrap_or_else(|| panic!("no nemesis for the README's fault {other:?}")),
        };
        let url = match route {
            Route::Direct => &direct,
            Route::Proxied => &proxied,
        };
        hold_to_claim(WORKER, label, url, TTL, &row, nemesis.as_mut()).await;
        assert_faults_applied(label, &row, std::slice::from_ref(&proxy));
    }
}

/// kill -9 of every process of a PostgreSQL server at once, as a crash of
/// its host would; restarted on the same data at heal.
struct TreeKill<'a> {
    server: &'a SqlInstance,
    stopped: Vec<Pid>,
}

#[async_trait]
impl Nemesis for TreeKill<'_> {
    fn label(&self) -> String {
        "server-kill".into()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        // Frozen first, so that no backend answers or commits anything
        // after the moment of the crash.
        self.stopped = freeze(self.server.port())?;
        self.server.process().kill();
        for &pid in &self.stopped {
            let _ = kill(pid, Signal::SIGKILL);
        }
        // A backend still attached to the shared memory would keep the new
        // postmaster from starting.
        for &pid in &self.stopped {
            while alive(pid) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        self.stopped.clear();
        self.server.process().restart();
        Ok(())
    }
}

/// SIGSTOP of every process of a PostgreSQL server for the fault's length,
/// then SIGCONT: a hung host.
struct TreePause<'a> {
    server: &'a SqlInstance,
    stopped: Vec<Pid>,
}

#[async_trait]
impl Nemesis for TreePause<'_> {
    fn label(&self) -> String {
        "server-pause".into()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        self.stopped = freeze(self.server.port())?;
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        for pid in std::mem::take(&mut self.stopped).into_iter().rev() {
            let _ = kill(pid, Signal::SIGCONT);
        }
        Ok(())
    }
}

/// Stops the postmaster listening on `port` (so it forks no more), then
/// every process below it; returns them all, the postmaster first.
fn freeze(port: u16) -> std::io::Result<Vec<Pid>> {
    let postmaster = postmaster(port)?;
    kill(postmaster, Signal::SIGSTOP)?;
    let mut stopped = vec![postmaster];
    // A child forked just before the stop may show up on a second look.
    loop {
        let fresh: Vec<Pid> = descendants(postmaster)
            .into_iter()
            .filter(|p| !stopped.contains(p))
            .collect();
        if fresh.is_empty() {
            return Ok(stopped);
        }
        for pid in fresh {
            let _ = kill(pid, Signal::SIGSTOP);
            stopped.push(pid);
        }
    }
}

/// The postmaster: the `postgres` process whose command line has `-p PORT`.
fn postmaster(port: u16) -> std::io::Result<Pid> {
    let port = port.to_string();
    processes()
        .into_iter()
        .find(|&(pid, _)| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"postgres"))
                && args
                    .windows(2)
                    .any(|w| w[0] == b"-p" && w[1] == port.as_bytes())
        })
        .map(|(pid, _)| Pid::from_raw(pid))
        .ok_or_else(|| std::io::Error::other(format!("no postmaster on port {port}")))
}

/// Every process below `root`.
fn descendants(root: Pid) -> Vec<Pid> {
    let all = processes();
    let mut found = vec![root.as_raw()];
    let mut at = 0;
    while at < found.len() {
        let parent = found[at];
        found.extend(all.iter().filter(|p| p.1 == parent).map(|p| p.0));
        at += 1;
    }
    found[1..].iter().map(|&p| Pid::from_raw(p)).collect()
}

/// Every process as (pid, parent pid).
fn processes() -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?.1)))
        .collect()
}

/// A process's state letter and parent pid, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may itself hold spaces.
    let mut fields = text.get(text.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// Whether `pid` is still a live process (not gone, not a zombie).
fn alive(pid: Pid) -> bool {
    stat(pid.as_raw()).is_some_and(|(state, _)| state != 'Z')
}
