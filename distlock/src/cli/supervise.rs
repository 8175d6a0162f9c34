//! While the command runs: keep it inside its lease.

use std::process::ExitStatus;
use std::time::Duration;

use distlock::{Error, Lease, LockGuard, LockState, Result};
use nix::sys::signal::Signal;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep, sleep_until};

use super::human;
use super::signals::Forwarded;
use super::terminal::Terminal;
use super::watchdog::Watchdog;

/// How long before its deadline a lease's command gets SIGTERM when renewal
/// keeps failing: `--grace`, but at most a third of the lease, which can be
/// shorter than `--ttl` (ZooKeeper caps it at two thirds of its session).
pub(crate) fn grace_for(lease: &Lease, grace: Duration) -> Duration {
    let length = lease.deadline().saturating_duration_since(lease.sent_at());
    grace.min(length / 3)
}

/// What supervising needs besides the command.
pub(crate) struct Supervisor<'a> {
    pub(crate) guard: &'a LockGuard,
    pub(crate) watchdog: &'a mut Watchdog,
    pub(crate) signals: &'a mut Forwarded,
    pub(crate) terminal: Option<&'a Terminal>,
    pub(crate) grace: Duration,
}

impl Supervisor<'_> {
    /// Waits for the command, passing on termination signals, and stops it
    /// before the lock can be somebody else's: SIGTERM once renewal is
    /// failing and only the grace is left, SIGKILL at the lease's deadline
    /// or as soon as the lock is known lost. The watchdog hears every new
    /// deadline, to do the same if distlock itself dies or stalls.
    ///
    /// `Err(Lost)` if the command was stopped for the lock's sake or the
    /// lock was lost while it ran.
    pub(crate) async fn run(&mut self, child: &mut Child) -> Result<ExitStatus> {
        let group = self.watchdog.group();
        let name = self.guard.name().clone();
        let mut states = self.guard.handle().watch();
        let mut states_open = true;
        let mut children = signal(SignalKind::child()).ok();
        let tick = (self.guard.lease().ttl() / 10)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut stopped = false;
        let (mut terminated, mut killed) = (false, false);
        loop {
            let lease = self.guard.lease();
            let grace = grace_for(&lease, self.grace);
            self.watchdog.tell(&lease, grace).await;
            let state = self.guard.state();
            if state == LockState::Lost && !killed {
                group.signal(Signal::SIGKILL);
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
                            group.signal(Signal::SIGKILL);
                            return Err(Error::backend(format!("waiting for the command: {e}")));
                        }
                    };
                    if terminated || killed || self.guard.handle().is_lost() {
                        return Err(Error::Lost { name: name.to_string() });
                    }
                    return Ok(status);
                }
                sig = self.signals.next() => group.signal(sig),
                changed = states.changed(), if states_open => match changed {
                    // The keep-alive is done; the lease's deadline still
                    // decides.
                    Err(_) => states_open = false,
                    Ok(()) => match *states.borrow_and_update() {
                        LockState::AtRisk => eprintln!(
                            "distlock: renewing lock \"{name}\" is failing; it is still held for {}",
                            human(self.guard.lease().remaining())
                        ),
                        LockState::Held => eprintln!("distlock: lock \"{name}\" renewed again"),
                        LockState::Lost => {}
                    },
                },
                () = sleep_until_some(term_at) => {
                    group.signal(Signal::SIGTERM);
                    terminated = true;
                    eprintln!(
                        "distlock: renewing lock \"{name}\" kept failing and {} of it is left; stopping the command (SIGTERM, SIGKILL when the lease runs out)",
                        human(self.guard.lease().remaining())
                    );
                }
                () = sleep_until(lease.deadline()), if !killed => {
                    group.signal(Signal::SIGKILL);
                    killed = true;
                    eprintln!("distlock: lock \"{name}\" ran out; killed the command");
                }
                () = self.watchdog.exited() => {
                    if let Err(e) = self.watchdog.replace().await {
                        eprintln!("distlock: the watchdog died and could not be replaced: {e}");
                    }
                }
                _ = next_child_event(&mut children) => stopped = self.on_stop(child, stopped),
                () = sleep(tick) => stopped = self.on_stop(child, stopped),
            }
        }
    }

    /// Notices the command being stopped (Ctrl-Z, SIGTTIN): with the
    /// terminal handed to it, suspends distlock's own job as a shell would;
    /// otherwise says once that the lock stays held meanwhile. Returns
    /// whether the command is stopped now.
    fn on_stop(&self, child: &Child, was_stopped: bool) -> bool {
        let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
            return false;
        };
        let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let Ok(WaitStatus::Stopped(_, sig)) = waitid(Id::Pid(Pid::from_raw(pid)), flags) else {
            return false;
        };
        match self.terminal {
            Some(terminal) => {
                terminal.suspend_with_command();
                false
            }
            None => {
                if !was_stopped {
                    eprintln!(
                        "distlock: the command was stopped ({sig}); lock \"{}\" stays held until it is continued or the lease is lost",
                        self.guard.name()
                    );
                }
                true
            }
        }
    }
}

/// Stops what the command left running in its group once it exited: the
/// lock is released only when nothing started under it still runs. SIGTERM
/// first, SIGKILL after `grace` or at the lease's deadline.
pub(crate) async fn stop_leftovers(guard: &LockGuard, watchdog: &Watchdog, grace: Duration) {
    let group = watchdog.group();
    let keep: Vec<Pid> = watchdog.pid().into_iter().collect();
    if !group.has_members_besides(&keep) {
        return;
    }
    group.signal(Signal::SIGTERM);
    eprintln!(
        "distlock: the command left processes running; stopping them before releasing the lock"
    );
    let lease = guard.lease();
    let kill_at = (Instant::now() + grace_for(&lease, grace)).min(lease.deadline());
    while Instant::now() < kill_at && group.has_members_besides(&keep) {
        sleep(Duration::from_millis(20)).await;
    }
    if group.has_members_besides(&keep) {
        group.signal(Signal::SIGKILL);
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
