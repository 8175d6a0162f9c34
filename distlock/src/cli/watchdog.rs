//! The watchdog: a small second process that stops the command when
//! `distlock run` can no longer vouch for the lock.
//!
//! `distlock run` may die (SIGKILL, the OOM killer) or stall (SIGSTOP, a
//! swap storm) while its command runs. Nothing in the dying process can act
//! then, so a separate process must: `distlock run` starts this one as the
//! leader of a new process group (before it even asks for the lock), puts
//! the command into that group, and tells it over a pipe, for every lease,
//! its deadline and when to send SIGTERM if nothing newer comes. The
//! watchdog then
//!
//! - sends SIGTERM to the group at that instant and SIGKILL at the deadline,
//!   unless it hears of a renewal first;
//! - on end of file without a final `done` (distlock died), sends SIGTERM at
//!   once and SIGKILL after `--grace` or at the deadline, whichever is first.
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
use super::group::Group;

/// The hidden subcommand that runs the watchdog.
pub(crate) const SUBCOMMAND: &str = "__watchdog";

/// What `distlock run` says over the pipe, one line each.
const LEASE: &str = "lease";
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
    /// The last deadline told, and when the watchdog would stop the command
    /// if it heard nothing newer.
    told: Option<(Instant, Instant)>,
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
            .arg(SUBCOMMAND)
            .arg(format!("--grace={}ms", grace.as_millis()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(join.map_or(0, |g| g.0.as_raw()))
            .spawn()?;
        let pid = process
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
                group: join.unwrap_or(Group(pid)),
                grace,
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
    pub(crate) fn group(&self) -> Group {
        self.group
    }

    /// The watchdog's own process, which stays in the group.
    pub(crate) fn pid(&self) -> Option<Pid> {
        self.process
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
    }

    /// Tells the watchdog about `lease` if its deadline moved: the deadline,
    /// and when to send SIGTERM if no renewal is heard of by then.
    pub(crate) async fn tell(&mut self, lease: &Lease, grace: Duration) {
        let deadline = lease.deadline().into_std();
        if self.told.is_some_and(|(d, _)| d == deadline) {
            return;
        }
        let term_at = silent_term_at(lease, grace, Instant::now());
        self.told = Some((deadline, term_at));
        self.send_lease().await;
    }

    async fn send_lease(&mut self) {
        let Some((deadline, term_at)) = self.told else {
            return;
        };
        if let (Some(d), Some(t)) = (monotonic_ns(deadline), monotonic_ns(term_at)) {
            self.send(&format!("{LEASE} {d} {t}\n")).await;
        }
    }

    /// Completes if the watchdog process exits.
    pub(crate) async fn exited(&mut self) {
        let _ = self.process.wait().await;
    }

    /// Starts a new watchdog in the same group after the last one died (it
    /// was killed by its pid: every other signal is blocked).
    pub(crate) async fn replace(&mut self) -> std::io::Result<()> {
        let mut next = Self::spawn(self.grace, Some(self.group)).await?;
        next.told = self.told;
        next.send_lease().await;
        *self = next;
        Ok(())
    }

    /// Tells the watchdog it is no longer needed and waits for it to exit.
    pub(crate) async fn dismiss(mut self) {
        self.send(&format!("{DONE}\n")).await;
        self.pipe = None;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.process.wait()).await;
    }

    async fn send(&mut self, line: &str) {
        if let Some(pipe) = self.pipe.as_mut() {
            // A watchdog that is gone was killed with the group, or will be
            // replaced; nothing to tell it any more.
            if pipe.write_all(line.as_bytes()).await.is_err() {
                self.pipe = None;
            }
        }
    }
}

/// When a watchdog that hears nothing newer sends SIGTERM: `grace` before
/// the deadline, but never before halfway from the next renewal (a third of
/// the lease's TTL after `now`, when the lease is told) to the deadline, so
/// a renewal that is merely on its way does not stop a healthy command.
pub(crate) fn silent_term_at(lease: &Lease, grace: Duration, now: Instant) -> Instant {
    let deadline = lease.deadline().into_std();
    let next_renewal = now + lease.ttl() / 3;
    let halfway = match deadline.checked_duration_since(next_renewal) {
        Some(left) => next_renewal + left / 2,
        None => deadline,
    };
    deadline
        .checked_sub(grace)
        .unwrap_or(now)
        .max(halfway)
        .min(deadline)
}

/// What the watchdog hears.
enum Heard {
    Lease { deadline: Instant, term_at: Instant },
    Done,
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
            let mut words = line.split(' ');
            let heard = match (words.next(), words.next(), words.next()) {
                (Some(LEASE), Some(d), Some(t)) => match (d.parse(), t.parse()) {
                    (Ok(d), Ok(t)) => Some(Heard::Lease {
                        deadline: from_monotonic_ns(d),
                        term_at: from_monotonic_ns(t),
                    }),
                    _ => None,
                },
                (Some(DONE), None, None) => Some(Heard::Done),
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
    let mut lease: Option<(Instant, Instant)> = None;
    let mut terminated = false;
    loop {
        let wake = match lease {
            Some((_, term_at)) if !terminated => term_at,
            Some((deadline, _)) => deadline,
            None => Instant::now() + FAR,
        };
        match heard.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(Heard::Lease { deadline, term_at }) => lease = Some((deadline, term_at)),
            Ok(Heard::Done) => return,
            Err(RecvTimeoutError::Timeout) if lease.is_none() => {}
            Err(RecvTimeoutError::Timeout) if terminated => {
                group.signal(Signal::SIGKILL);
                say("the lease ran out; killed the command");
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                group.signal(Signal::SIGTERM);
                terminated = true;
                say("distlock has not renewed the lock in time; stopping the command (SIGTERM)");
            }
            Err(RecvTimeoutError::Disconnected) => {
                group.signal(Signal::SIGTERM);
                say("distlock is gone; stopping the command (SIGTERM)");
                let now = Instant::now();
                let kill_at = lease.map_or(now + grace, |(d, _)| d.min(now + grace));
                while Instant::now() < kill_at && group.has_members_besides(&[me]) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                group.signal(Signal::SIGKILL);
                return;
            }
        }
    }
}

/// Logs on a thread of its own: a full stderr pipe must not hold up the
/// next signal.
fn say(what: &str) {
    let line = format!("distlock watchdog: {what}\n");
    std::thread::spawn(move || {
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::{FencingToken, LockName, OwnerToken};

    fn lease(ttl: Duration, sent_at: tokio::time::Instant) -> Lease {
        let name = LockName::new("a").unwrap();
        Lease::new(name, OwnerToken::random(), FencingToken(1), ttl, sent_at)
    }

    /// A backend may grant less than `--ttl` (ZooKeeper caps a lease at two
    /// thirds of its session timeout): the watchdog must still wait for the
    /// renewal of the lease it was told of.
    #[test]
    fn silence_counts_from_the_renewal_of_the_real_lease() {
        let now = tokio::time::Instant::now();
        let short = lease(Duration::from_millis(6_667), now);
        let term = silent_term_at(&short, Duration::from_secs(10), now.into_std());
        let renewal = now.into_std() + Duration::from_millis(2_222);
        assert!(term > renewal, "SIGTERM before the first renewal was due");
        assert!(term < short.deadline().into_std());
    }

    #[test]
    fn silence_gives_grace_when_the_lease_leaves_room() {
        let now = tokio::time::Instant::now();
        let long = lease(Duration::from_secs(30), now);
        let term = silent_term_at(&long, Duration::from_secs(2), now.into_std());
        assert_eq!(
            term,
            long.deadline().into_std() - Duration::from_secs(2),
            "SIGTERM --grace before the deadline"
        );
    }

    #[test]
    fn monotonic_nanoseconds_round_trip() {
        let at = Instant::now() + Duration::from_millis(1500);
        let back = from_monotonic_ns(monotonic_ns(at).unwrap());
        let apart = if back > at { back - at } else { at - back };
        assert!(apart < Duration::from_millis(5), "{apart:?}");
    }
}
