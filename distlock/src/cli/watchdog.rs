//! The watchdog: a small second process that stops the command when
//! `distlock run` can no longer vouch for the lock.
//!
//! `distlock run` may die (SIGKILL, the OOM killer) or stall (SIGSTOP, a
//! swap storm) while its command runs. Nothing in the dying process can act
//! then, so a separate process must: `distlock run` starts this one as the
//! leader of a new process group, puts the command into that group, and
//! tells it every lease deadline over a pipe. The watchdog then
//!
//! - sends SIGTERM to the group when the last deadline it heard of is
//!   `min(--grace, ttl/3)` away (a renewal would have moved it by then), and
//!   SIGKILL at the deadline itself;
//! - on end of file without a final `done` (distlock died), sends SIGTERM at
//!   once and SIGKILL after `--grace` or at the deadline, whichever is first.
//!
//! It ignores the termination signals that reach the group (they are meant
//! for the command) by keeping them blocked; SIGKILL to the group ends it
//! with the command. Signalling the whole group reaches the command's own
//! children too (`sh -c 'a & b'`).

use std::io::{BufRead, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::{Pid, getpgrp, getpid};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::args::WatchdogArgs;

/// The hidden subcommand that runs the watchdog.
pub(crate) const SUBCOMMAND: &str = "__watchdog";

/// What `distlock run` says over the pipe, one line each.
const DEADLINE: &str = "deadline";
const DONE: &str = "done";
/// What the watchdog prints on stdout once its signals are blocked.
const READY: &str = "ready";
/// Farther than any lease: what "no deadline yet" waits for.
const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The `distlock run` side: the running watchdog and the pipe to it.
pub(crate) struct Watchdog {
    process: Child,
    pipe: Option<ChildStdin>,
    group: Pid,
    told: Option<Instant>,
}

impl Watchdog {
    /// Starts the watchdog as the leader of a new process group and waits
    /// until it is ready to guard it.
    pub(crate) async fn start(grace: Duration, ttl: Duration) -> std::io::Result<Self> {
        let exe = std::env::current_exe()?;
        let mut process = Command::new(exe)
            .arg(SUBCOMMAND)
            .arg(format!("--grace={}ms", grace.as_millis()))
            .arg(format!("--ttl={}ms", ttl.as_millis()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()?;
        let group = process
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| std::io::Error::other("the watchdog exited at once"))?;
        let pipe = process.stdin.take();
        let stdout = process.stdout.take();
        let ready = async {
            let mut line = String::new();
            if let Some(out) = stdout {
                BufReader::new(out).read_line(&mut line).await?;
            }
            Ok::<_, std::io::Error>(line.trim() == READY)
        };
        match tokio::time::timeout(Duration::from_secs(10), ready).await {
            Ok(Ok(true)) => Ok(Self {
                process,
                pipe,
                group,
                told: None,
            }),
            Ok(Err(e)) => Err(e),
            _ => {
                let _ = process.start_kill();
                Err(std::io::Error::other("the watchdog did not start"))
            }
        }
    }

    /// The process group the command must join.
    pub(crate) fn group(&self) -> Pid {
        self.group
    }

    /// Tells the watchdog the lease's deadline if it moved.
    pub(crate) async fn tell(&mut self, deadline: Instant) {
        if self.told == Some(deadline) {
            return;
        }
        self.told = Some(deadline);
        let Some(ns) = monotonic_ns(deadline) else {
            return;
        };
        self.send(&format!("{DEADLINE} {ns}\n")).await;
    }

    /// Tells the watchdog it is no longer needed and waits for it to exit.
    pub(crate) async fn dismiss(mut self) {
        self.send(&format!("{DONE}\n")).await;
        self.pipe = None;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.process.wait()).await;
    }

    async fn send(&mut self, line: &str) {
        if let Some(pipe) = self.pipe.as_mut() {
            // A watchdog that is gone was killed with the group; nothing to
            // tell it any more.
            if pipe.write_all(line.as_bytes()).await.is_err() {
                self.pipe = None;
            }
        }
    }
}

/// What the watchdog hears.
enum Heard {
    Deadline(Instant),
    Done,
}

/// The watchdog process itself; returns its exit status.
pub(crate) fn main(args: &WatchdogArgs) -> u8 {
    // Blocked before any thread exists, so every thread inherits it and
    // these signals, sent to the group for the command, stay pending here.
    let mut ignored = SigSet::empty();
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        ignored.add(sig);
    }
    if ignored.thread_block().is_err() {
        return 1;
    }
    let group = getpgrp();
    if group != getpid() {
        say("the watchdog must lead its own process group");
        return 1;
    }
    let heard = listen();
    {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{READY}").and_then(|()| out.flush()).is_err() {
            return 1;
        }
    }
    guard(group, args, &heard);
    0
}

/// Reads the pipe on a thread of its own; the channel closes at end of file.
fn listen() -> mpsc::Receiver<Heard> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            let heard = match line.split_once(' ') {
                Some((DEADLINE, ns)) => ns.parse().ok().map(from_monotonic_ns).map(Heard::Deadline),
                None if line == DONE => Some(Heard::Done),
                _ => None,
            };
            if let Some(heard) = heard {
                let done = matches!(heard, Heard::Done);
                if tx.send(heard).is_err() || done {
                    return;
                }
            }
        }
    });
    rx
}

/// Waits for news and acts on silence, until dismissed.
fn guard(group: Pid, args: &WatchdogArgs, heard: &mpsc::Receiver<Heard>) {
    let lead = args.grace.min(args.ttl / 3);
    let mut deadline: Option<Instant> = None;
    let mut terminated = false;
    loop {
        let wake = match deadline {
            Some(d) if !terminated => d.checked_sub(lead).unwrap_or(d),
            Some(d) => d,
            None => Instant::now() + FAR,
        };
        match heard.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(Heard::Deadline(d)) => deadline = Some(d),
            Ok(Heard::Done) => return,
            Err(RecvTimeoutError::Timeout) if deadline.is_none() => {}
            Err(RecvTimeoutError::Timeout) if terminated => {
                say("the lease ran out; killing the command");
                let _ = killpg(group, Signal::SIGKILL);
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                say("distlock has not renewed the lock in time; stopping the command (SIGTERM)");
                let _ = killpg(group, Signal::SIGTERM);
                terminated = true;
            }
            Err(RecvTimeoutError::Disconnected) => {
                say("distlock is gone; stopping the command (SIGTERM)");
                let _ = killpg(group, Signal::SIGTERM);
                let now = Instant::now();
                let kill_at = deadline.map_or(now + args.grace, |d| d.min(now + args.grace));
                while Instant::now() < kill_at && others_in(group) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = killpg(group, Signal::SIGKILL);
                return;
            }
        }
    }
}

/// Whether a live process other than this one is in `group`. Reads /proc
/// (Linux); where that cannot be read, assumes there is.
fn others_in(group: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    let me = getpid().as_raw();
    entries.flatten().any(|entry| {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            return false;
        };
        if pid == me {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // After the command name in parentheses: state, ppid, pgrp, …
        let mut fields = stat
            .rsplit_once(')')
            .map_or("", |(_, f)| f)
            .split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(group.as_raw()) && state != Some("Z")
    })
}

fn say(what: &str) {
    let _ = writeln!(std::io::stderr(), "distlock watchdog: {what}");
}

/// `at` as nanoseconds on `CLOCK_MONOTONIC`, the clock every process on the
/// host shares (std's `Instant` reads it too, but does not expose it).
fn monotonic_ns(at: Instant) -> Option<u128> {
    let now_ns = Duration::from(clock_gettime(ClockId::CLOCK_MONOTONIC).ok()?).as_nanos();
    let now = Instant::now();
    match at.checked_duration_since(now) {
        Some(ahead) => Some(now_ns + ahead.as_nanos()),
        None => now_ns.checked_sub(now.duration_since(at).as_nanos()),
    }
}

/// The inverse of [`monotonic_ns`], in this process.
fn from_monotonic_ns(ns: u128) -> Instant {
    let now = Instant::now();
    let now_ns = clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|ts| Duration::from(ts).as_nanos())
        .unwrap_or(0);
    let apart = |ns: u128| Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)).min(FAR);
    if ns >= now_ns {
        now + apart(ns - now_ns)
    } else {
        now.checked_sub(apart(now_ns - ns)).unwrap_or(now)
    }
}
