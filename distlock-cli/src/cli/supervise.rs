//! While the command runs: keep it inside its lease.

use std::process::ExitStatus;
use std::time::Duration;

use distlock::{Error, Lease, LockGuard, LockState, Result};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, getpgid};
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep, sleep_until};

use super::group::{Group, continues_after, pid_of};
use super::show::human;
use super::signals::Forwarded;
use super::watchdog::Watchdog;

/// How long before its deadline a lease's command gets SIGTERM when renewal
/// keeps failing: `--grace`, but at most a third of the lease, which can be
/// shorter than `--ttl` (ZooKeeper caps it at two thirds of its session).
pub(crate) fn grace_for(lease: &Lease, grace: Duration) -> Duration {
    let length = lease.deadline().saturating_duration_since(lease.sent_at());
    grace.min(length / 3)
}

/// How often distlock looks at its lease and tells the watchdog it is alive.
pub(crate) fn beat_for(lease: &Lease) -> Duration {
    (lease.ttl() / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Tells the watchdog about `lease`, with the grace and heartbeat that go
/// with it.
pub(crate) async fn tell(watchdog: &mut Watchdog, lease: &Lease, grace: Duration) {
    watchdog
        .tell(lease, grace_for(lease, grace), beat_for(lease))
        .await;
}

/// The command and its process group, signalled together: the group reaches
/// everything the command started, the pid reaches the command even if it
/// moved to a group of its own.
#[derive(Clone, Copy)]
struct Target {
    group: Group,
    pid: Option<Pid>,
}

impl Target {
    fn signal(self, sig: Signal) {
        self.group.signal(sig);
        if let Some(pid) = self.pid
            && getpgid(Some(pid)).is_ok_and(|g| g != self.group.0)
        {
            let _ = kill(pid, sig);
            if continues_after(sig) {
                let _ = kill(pid, Signal::SIGCONT);
            }
        }
    }
}

/// What supervising needs besides the command.
pub(crate) struct Supervisor<'a> {
    pub(crate) guard: &'a LockGuard,
    pub(crate) watchdog: &'a mut Watchdog,
    pub(crate) signals: &'a mut Forwarded,
    pub(crate) grace: Duration,
}

impl Supervisor<'_> {
    /// Waits for the command, passing on termination signals, and stops it
    /// before the lock can be somebody else's: SIGTERM once renewal is
    /// failing and only the grace is left, SIGKILL at the lease's deadline
    /// or as soon as the lock is known lost. The watchdog hears every new
    /// lease and a heartbeat, to do the same if distlock itself dies or
    /// stalls.
    ///
    /// `Err(Lost)` if the command was stopped for the lock's sake or the
    /// lock was lost while it ran.
    pub(crate) async fn run(&mut self, child: &mut Child) -> Result<ExitStatus> {
        let target = Target {
            group: self.watchdog.group(),
            pid: pid_of(child),
        };
        let name = self.guard.name().clone();
        let mut states = self.guard.handle().watch();
        let mut states_open = true;
        let mut children = signal(SignalKind::child()).ok();
        let (mut terminated, mut killed, mut said_stopped) = (false, false, false);
        loop {
            let lease = self.guard.lease();
            tell(self.watchdog, &lease, self.grace).await;
            let grace = grace_for(&lease, self.grace);
            let state = self.guard.state();
            if state == LockState::Lost && !killed {
                target.signal(Signal::SIGKILL);
                killed = true;
                eprintln!("distlock: lock \"{name}\" was lost; killed the command");
            }
            let term_at = match state {
                LockState::AtRisk if !terminated => Some(
                    lease
                        .deadline()
                        .checked_sub(grace)
                        .unwrap_or_else(Instant::now),
                ),
                _ => None,
            };
            tokio::select! {
                biased;
                status = child.wait() => {
                    let status = match status {
                        Ok(status) => status,
                        Err(e) => {
                            // Not knowing whether it still runs, make sure it
                            // does not.
                            target.signal(Signal::SIGKILL);
                            return Err(Error::backend(format!("waiting for the command: {e}")));
                        }
                    };
                    if terminated || killed || self.guard.handle().is_lost() {
                        return Err(Error::lost(name.to_string()));
                    }
                    return Ok(status);
                }
                sig = self.signals.next() => match sig {
                    Signal::SIGTSTP => suspend(target),
                    sig => target.signal(sig),
                },
                changed = states.changed(), if states_open => match changed {
                    // The keep-alive is done; the lease's deadline still
                    // decides.
                    None => states_open = false,
                    Some(LockState::AtRisk) => eprintln!(
                        "distlock: renewing lock \"{name}\" is failing; it is still held for {}",
                        human(self.guard.lease().remaining())
                    ),
                    Some(LockState::Held) => eprintln!("distlock: lock \"{name}\" renewed again"),
                    Some(_) => {}
                },
                () = sleep_until_some(term_at) => {
                    target.signal(Signal::SIGTERM);
                    terminated = true;
                    eprintln!(
                        "distlock: renewing lock \"{name}\" kept failing and {} of it is left; stopping the command (SIGTERM, SIGKILL when the lease runs out)",
                        human(self.guard.lease().remaining())
                    );
                }
                // Looked at again when it fires: a renewal may have moved it.
                () = sleep_until(lease.deadline()), if !killed => {
                    if self.guard.lease().is_expired() {
                        target.signal(Signal::SIGKILL);
                        killed = true;
                        eprintln!("distlock: lock \"{name}\" ran out; killed the command");
                    }
                }
                () = self.watchdog.exited(), if !killed => {
                    if let Err(e) = self.watchdog.replace().await {
                        eprintln!("distlock: the watchdog died and could not be replaced: {e}");
                    }
                }
                _ = next_child_event(&mut children) => self.on_stop(target, &mut said_stopped),
                () = sleep(beat_for(&lease)) => self.on_stop(target, &mut said_stopped),
            }
        }
    }

    /// Notices the command being stopped. One that tried to use the
    /// terminal (SIGTTIN, SIGTTOU: it runs in a background process group)
    /// would wait for good while the lock is renewed, so it is stopped with
    /// SIGTERM (its own status then tells how it ended); any other stop is
    /// reported once.
    fn on_stop(&self, target: Target, said: &mut bool) {
        let Some(pid) = target.pid else {
            return;
        };
        let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let Ok(WaitStatus::Stopped(_, sig)) = waitid(Id::Pid(pid), flags) else {
            *said = false;
            return;
        };
        if matches!(sig, Signal::SIGTTIN | Signal::SIGTTOU) {
            target.signal(Signal::SIGTERM);
            eprintln!(
                "distlock: the command tried to use the terminal ({sig}), which a command under distlock run cannot; stopping it"
            );
            return;
        }
        if !*said {
            *said = true;
            eprintln!(
                "distlock: the command was stopped ({sig}); lock \"{}\" stays held until it is continued or the lease is lost",
                self.guard.name()
            );
        }
    }
}

/// Ctrl-Z (SIGTSTP) reaches distlock, in the terminal's foreground group:
/// stop the command, then distlock itself, as the shell expects of a job;
/// once continued (`fg`, `bg`), continue the command. Nothing renews the
/// lock meanwhile, so the watchdog stops the command if the pause outlasts
/// the lease.
fn suspend(target: Target) {
    // SIGTSTP, not SIGSTOP: the watchdog, in the same group, blocks it and
    // stays awake.
    target.signal(Signal::SIGTSTP);
    let _ = kill(Pid::this(), Signal::SIGSTOP);
    target.signal(Signal::SIGCONT);
}

/// Stops what the command left running in its group once it exited: the
/// lock is released only when nothing started under it still runs. SIGTERM
/// first; SIGKILL after the grace, at the lease's deadline, or at once if
/// the lock is lost meanwhile; then waits (within the lease) for the group
/// to be empty.
pub(crate) async fn stop_leftovers(guard: &LockGuard, watchdog: &mut Watchdog, grace: Duration) {
    let group = watchdog.group();
    let keep: Vec<Pid> = watchdog.pid().into_iter().collect();
    if !group.has_members_besides(&keep) {
        return;
    }
    group.signal(Signal::SIGTERM);
    eprintln!(
        "distlock: the command left processes running; stopping them before releasing the lock"
    );
    let kill_at = Instant::now() + grace_for(&guard.lease(), grace);
    let mut killed = false;
    while group.has_members_besides(&keep) {
        let lease = guard.lease();
        tell(watchdog, &lease, grace).await;
        if lease.is_expired() {
            group.signal(Signal::SIGKILL);
            break;
        }
        if !killed && (Instant::now() >= kill_at || guard.state() == LockState::Lost) {
            group.signal(Signal::SIGKILL);
            killed = true;
        }
        sleep(Duration::from_millis(20)).await;
    }
}

async fn next_child_event(children: &mut Option<tokio::signal::unix::Signal>) {
    match children {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}
