//! What the CLI tests share: the binary, a temporary SQLite URL, bounded
//! waits and process checks.

#![allow(dead_code)] // each test binary uses its own part

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_distlock");

pub(crate) fn distlock(dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir)
        .env_remove("DISTLOCK_URL")
        .env_remove("RUST_LOG");
    cmd
}

pub(crate) fn url(dir: &Path) -> String {
    format!("sqlite://{}/locks.db", dir.display())
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Polls `cond` every 20 ms for up to 30 s.
pub(crate) fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), sig).unwrap();
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether `pid` is a process that still runs (not gone, not a zombie).
pub(crate) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !state.is_some_and(|s| s.starts_with('Z'))
    })
}

pub(crate) fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Sends SIGKILL to each of `pids`, ignoring those already gone.
pub(crate) fn kill_all(pids: &[i32]) {
    for pid in pids {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
}

/// Waits up to `limit` for every one of `pids` to be gone; how long it took,
/// or `None`.
pub(crate) fn all_gone_within(pids: &[i32], limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    while pids.iter().any(|&pid| alive(pid)) {
        if started.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(started.elapsed())
}
