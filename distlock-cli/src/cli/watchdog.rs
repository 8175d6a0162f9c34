//! The watchdog: a small second process that stops the command when
//! `distlock run` can no longer vouch for the lock.
//!
//! `distlock run` may die (SIGKILL, the OOM killer) or stall (SIGSTOP, a
//! swap storm, a blocked stderr) while its command runs. Nothing in the
//! stuck process can act then, so a separate process must: `distlock run`
//! starts this one as the leader of a new process group (before it even
//! asks for the lock) and puts the command into that group. Over a pipe it
//! tells the watchdog each lease (its deadline, and how long before it the
//! command should get SIGTERM) and sends a heartbeat every few moments. The
//! watchdog then
//!
//! - sends SIGKILL to the group at the last deadline it heard of;
//! - sends SIGTERM earlier, the grace before that deadline, but only if the
//!   heartbeats have stopped (a live distlock handles a failing renewal
//!   itself, and a renewal that is merely slow is no reason to stop);
//! - on end of file without a final `done` (distlock died), sends SIGTERM at
//!   once and SIGKILL after the grace or at the deadline, whichever is first.
//!
//! PR_SET_PDEATHSIG would do neither: it reaches only the direct child (not
//! what a shell command starts), and nothing when distlock is stalled.
//!
//! The watchdog keeps every signal it can blocked: those sent to the group
//! are meant for the command (and a stop signal would leave the command
//! unguarded). It signals before it logs, and logs from a thread of its own,
//! so a stderr that nobody reads cannot hold up a stop.

use std::io::{BufRead, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use distlock::Lease;
use nix::sys::signal::{SigSet, Signal};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::{Pid, getpgrp};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::args::WatchdogArgs;
use super::group::{Group, pid_of};

/// The hidden subcommand that runs the watchdog.
pub(crate) const SUBCOMMAND: &str = "__watchdog";

/// What `distlock run` says over the pipe, one line each: `lease DEADLINE
/// GRACE SILENCE` (nanoseconds: the deadline on `CLOCK_MONOTONIC`, then
/// durations), `beat`, `done`.
const LEASE: &str = "lease";
const BEAT: &str = "beat";
const DONE: &str = "done";
/// What the watchdog prints on stdout once its signals are blocked.
const READY: &str = "ready";
/// Farther than any lease: what "no deadline yet" waits for.
const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The `distlock run` side: the running watchdog and the pipe to it.
pub(crate) struct Watchdog {
    process: Child,
    pipe: Option<ChildStdin>,
    group: Group,
    grace: Duration,
    /// The last lease told: deadline, grace, and the silence after which
    /// distlock counts as stalled.
    told: Option<(Instant, Duration, Duration)>,
    beaten: Instant,
    /// Set once it could not be replaced: not watched any more.
    lost_for_good: bool,
}

impl Watchdog {
    /// Starts the watchdog as the leader of a new process group and waits
    /// until it is ready to guard it.
    pub(crate) async fn start(grace: Duration) -> std::io::Result<Self> {
        Self::spawn(grace, None).await
    }

    async fn spawn(grace: Duration, join: Option<Group>) -> std::io::Result<Self> {
        // /proc/self/exe still works after a package upgrade replaced the
        // binary on disk; current_exe() then names a deleted file.
        let exe = match std::path::Path::new("/proc/self/exe") {
            p if p.exists() => p.to_path_buf(),
            _ => std::env::current_exe()?,
        };
        let mut process = Command::new(exe)
            .arg0("distlock")
            .arg(SUBCOMMAND)
            .arg(format!("--grace={}ms", grace.as_millis()))
            // It never reaches the lock store: no credentials for it.
            .env_remove(super::args::URL_ENV)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(join.map_or(0, |g| g.0.as_raw()))
            .spawn()?;
        let pid =
            pid_of(&process).ok_or_else(|| std::io::Error::other("the watchdog exited at once"))?;
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
                group: join.unwrap_or(Group(pid)),
                grace,
                told: None,
                beaten: Instant::now(),
                lost_for_good: false,
            }),
            Ok(Err(e)) => Err(e),
            _ => {
                let _ = process.start_kill();
                Err(std::io::Error::other("the watchdog did not start"))
            }
        }
    }

    /// The process group the command must join.
    pub(crate) fn group(&self) -> Group {
        self.group
    }

    /// The watchdog's own process, which stays in the group.
    pub(crate) fn pid(&self) -> Option<Pid> {
        pid_of(&self.process)
    }

    /// Tells the watchdog about `lease` if its deadline moved, and beats if
    /// `every` has passed since the last line: `grace` is how long before the
    /// deadline a stalled distlock's command gets SIGTERM, and three missed
    /// beats count as stalled.
    pub(crate) async fn tell(&mut self, lease: &Lease, grace: Duration, every: Duration) {
        let deadline = lease.deadline().into_std();
        if self.told.is_none_or(|(d, _, _)| d != deadline) {
            self.told = Some((deadline, grace, every * 3));
            self.send_lease().await;
        } else if self.beaten.elapsed() >= every {
            self.send(&format!("{BEAT}\n")).await;
        }
    }

    async fn send_lease(&mut self) {
        let Some((deadline, grace, silence)) = self.told else {
            return;
        };
        if let Some(d) = monotonic_ns(deadline) {
            let line = format!("{LEASE} {d} {} {}\n", grace.as_nanos(), silence.as_nanos());
            self.send(&line).await;
        }
    }

    /// Completes if the watchdog process exits; never, once it could not
    /// be replaced.
    pub(crate) async fn exited(&mut self) {
        if self.lost_for_good {
            return std::future::pending().await;
        }
        let _ = self.process.wait().await;
    }

    /// Starts a new watchdog in the same group after the last one died (it
    /// was killed by its pid: every other signal is blocked). Fails for good
    /// if the group is gone (the command left it, or was killed with it).
    pub(crate) async fn replace(&mut self) -> std::io::Result<()> {
        match Self::spawn(self.grace, Some(self.group)).await {
            Ok(mut next) => {
                next.told = self.told;
                next.send_lease().await;
                *self = next;
                Ok(())
            }
            Err(e) => {
                self.lost_for_good = true;
                self.pipe = None;
                Err(e)
            }
        }
    }

    /// Tells the watchdog it is no longer needed and waits for it to exit.
    pub(crate) async fn dismiss(mut self) {
        self.send(&format!("{DONE}\n")).await;
        self.pipe = None;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.process.wait()).await;
    }

    async fn send(&mut self, line: &str) {
        self.beaten = Instant::now();
        if let Some(pipe) = self.pipe.as_mut() {
            // A watchdog that is gone was killed with the group, or will be
            // replaced; nothing to tell it any more.
            if pipe.write_all(line.as_bytes()).await.is_err() {
                self.pipe = None;
            }
        }
    }
}

/// What the watchdog hears.
enum Heard {
    Lease(Told),
    Beat,
    Done,
}

/// One lease as told: its deadline, how long before it a stalled distlock's
/// command gets SIGTERM, and how long a silence means stalled.
#[derive(Clone, Copy)]
struct Told {
    deadline: Instant,
    grace: Duration,
    silence: Duration,
}

/// The watchdog process itself; returns its exit status.
pub(crate) fn main(args: &WatchdogArgs) -> u8 {
    // Blocked before any thread exists, so every thread inherits it.
    if SigSet::all().thread_block().is_err() {
        return 1;
    }
    let group = Group(getpgrp());
    let heard = listen();
    {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{READY}").and_then(|()| out.flush()).is_err() {
            return 1;
        }
    }
    guard(group, args.grace, &heard);
    0
}

/// Reads the pipe on a thread of its own; the channel closes at end of file.
fn listen() -> mpsc::Receiver<Heard> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            let words: Vec<&str> = line.split(' ').collect();
            let heard = match words.as_slice() {
                [LEASE, d, g, s] => match (d.parse(), g.parse(), s.parse()) {
                    (Ok(d), Ok(g), Ok(s)) => Some(Heard::Lease(Told {
                        deadline: from_monotonic_ns(d),
                        grace: nanos(g),
                        silence: nanos(s),
                    })),
                    _ => None,
                },
                [BEAT] => Some(Heard::Beat),
                [DONE] => Some(Heard::Done),
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
fn guard(group: Group, grace: Duration, heard: &mpsc::Receiver<Heard>) {
    let me = Pid::this();
    let log = Log::default();
    let mut lease: Option<Told> = None;
    let mut last_heard = Instant::now();
    let mut terminated = false;
    loop {
        let now = Instant::now();
        let wake = match lease {
            None => now + FAR,
            Some(l) if terminated => l.deadline,
            // SIGTERM is due once the grace is left and distlock has been
            // silent for long enough, whichever comes later.
            Some(l) => l
                .deadline
                .checked_sub(l.grace)
                .unwrap_or(now)
                .max(last_heard + l.silence)
                .min(l.deadline),
        };
        match heard.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(heard) => {
                last_heard = Instant::now();
                match heard {
                    Heard::Lease(l) => lease = Some(l),
                    Heard::Beat => {}
                    Heard::Done => return log.flush(),
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                let Some(l) = lease else { continue };
                let now = Instant::now();
                if now >= l.deadline {
                    group.signal(Signal::SIGKILL);
                    log.say("the lease ran out; killed the command");
                    return log.flush();
                }
                let silent = now >= last_heard + l.silence;
                if !terminated && silent && now + l.grace >= l.deadline {
                    group.signal(Signal::SIGTERM);
                    terminated = true;
                    log.say("distlock stopped renewing the lock; stopping the command (SIGTERM)");
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                if !group.has_members_besides(&[me]) {
                    return;
                }
                group.signal(Signal::SIGTERM);
                log.say("distlock is gone; stopping the command (SIGTERM)");
                let now = Instant::now();
                let kill_at = lease.map_or(now + grace, |l| l.deadline.min(now + grace));
                while Instant::now() < kill_at && group.has_members_besides(&[me]) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                log.flush();
                group.signal(Signal::SIGKILL);
                return;
            }
        }
    }
}

/// The watchdog's messages, written by threads of their own so that a full
/// stderr pipe cannot hold up the next signal, and waited for (briefly)
/// before the watchdog ends.
#[derive(Default)]
struct Log {
    written: std::cell::RefCell<Vec<mpsc::Receiver<()>>>,
}

impl Log {
    fn say(&self, what: &str) {
        let line = format!("distlock watchdog: {what}\n");
        let (done, written) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = std::io::stderr().write_all(line.as_bytes());
            let _ = done.send(());
        });
        self.written.borrow_mut().push(written);
    }

    fn flush(&self) {
        let until = Instant::now() + Duration::from_millis(200);
        for written in self.written.borrow().iter() {
            let _ = written.recv_timeout(until.saturating_duration_since(Instant::now()));
        }
    }
}

fn nanos(n: u128) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX)).min(FAR)
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
    if ns >= now_ns {
        now + nanos(ns - now_ns)
    } else {
        now.checked_sub(nanos(now_ns - ns)).unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_nanoseconds_round_trip() {
        let at = Instant::now() + Duration::from_millis(1500);
        let back = from_monotonic_ns(monotonic_ns(at).unwrap());
        let apart = if back > at { back - at } else { at - back };
        assert!(apart < Duration::from_millis(5), "{apart:?}");
    }
}
