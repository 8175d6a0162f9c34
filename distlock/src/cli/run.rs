//! `distlock run`: hold a lock while a command runs.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{AcquireOptions, Error, LockGuard, LockName, LockState, Locker, Result, Wait};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use super::args::RunArgs;
use super::exit;
use super::watchdog::Watchdog;

pub(crate) async fn run(args: RunArgs) -> Result<u8> {
    let grace = args.grace();
    if grace >= args.ttl && !args.ttl.is_zero() {
        eprintln!(
            "distlock: --grace ({}) must be shorter than --ttl ({}): the command is stopped while the lease still has --grace left",
            human(grace),
            human(args.ttl)
        );
        return Ok(exit::USAGE);
    }
    let name = LockName::new(&args.backend.name)?;
    // Installed before anything is spawned, so a signal meant for the
    // command is never lost to the default action (which would end distlock
    // and leave the command unsupervised).
    let mut forwarded = Forwarded::install();
    let locker = distlock::connect(&args.backend.url).await?;
    let wait = match (args.no_wait, args.wait) {
        (true, _) => Wait::No,
        (false, Some(d)) => Wait::For(d),
        (false, None) => Wait::Forever,
    };
    let opts = AcquireOptions::with_ttl(args.ttl);
    // A signal while waiting ends the wait; the acquire is cancel-safe.
    let guard = tokio::select! {
        guard = acquire(&locker, &name, opts, wait) => guard?,
        sig = forwarded.next() => {
            eprintln!("distlock: {sig} while waiting for lock \"{name}\"; giving up");
            return Ok(128 + u8::try_from(sig as i32).unwrap_or(0));
        }
    };

    if guard.handle().is_lost() {
        // Granted, but the reply came after the lease ran out.
        let _ = guard.release().await;
        return Err(Error::Lost {
            name: name.to_string(),
        });
    }
    let mut watchdog = match Watchdog::start(grace, args.ttl).await {
        Ok(w) => w,
        Err(e) => {
            eprintln!(
                "distlock: cannot start the watchdog that stops the command if distlock dies: {e}"
            );
            release(guard).await;
            return Ok(exit::INTERNAL);
        }
    };
    watchdog.tell(guard.lease().deadline().into_std()).await;
    let mut child = match spawn(&args, &guard, watchdog.group()) {
        Ok(child) => child,
        Err((status, message)) => {
            eprintln!("distlock: {message}");
            watchdog.dismiss().await;
            release(guard).await;
            return Ok(status);
        }
    };
    let outcome = supervise(&mut child, &guard, &mut watchdog, &mut forwarded, grace).await;
    watchdog.dismiss().await;
    match outcome {
        Ok(status) => {
            release(guard).await;
            Ok(status_code(status))
        }
        Err(stopped) => {
            let _ = guard.release().await;
            Err(stopped)
        }
    }
}

/// Takes the lock, saying on stderr what it waits for if it is held.
async fn acquire(
    locker: &Locker,
    name: &LockName,
    opts: AcquireOptions,
    wait: Wait,
) -> Result<LockGuard> {
    match locker.lock_with(name, opts.wait(Wait::No)).await {
        Err(Error::Busy { .. }) if wait != Wait::No => {}
        other => return other,
    }
    let holder = match locker.holder(name).await {
        Ok(Some(h)) => format!(" (held by owner {}…, fencing token {})", h.owner, h.token),
        _ => String::new(),
    };
    let limit = match wait {
        Wait::For(d) => format!(" for up to {}", human(d)),
        _ => String::new(),
    };
    eprintln!("distlock: waiting{limit} for lock \"{name}\"{holder}");
    locker.lock_with(name, opts.wait(wait)).await
}

/// Starts the command in the watchdog's process group, so that one signal
/// to the group reaches the command and every process it starts.
fn spawn(
    args: &RunArgs,
    guard: &LockGuard,
    group: Pid,
) -> std::result::Result<Child, (u8, String)> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or((exit::USAGE, "no command given".to_owned()))?;
    Command::new(program)
        .args(rest)
        .env("DISTLOCK_NAME", guard.name().as_str())
        .env("DISTLOCK_TOKEN", guard.token().to_string())
        .process_group(group.as_raw())
        .spawn()
        .map_err(|e| {
            let shown = program.to_string_lossy();
            match e.kind() {
                ErrorKind::NotFound => (exit::NOT_FOUND, format!("command not found: {shown}")),
                _ => (exit::CANNOT_EXECUTE, format!("cannot execute {shown}: {e}")),
            }
        })
}

/// Waits for the command, forwarding termination signals, and stops it
/// before the lock can be somebody else's: SIGTERM once renewal is failing
/// and only `grace` of the lease is left, SIGKILL at the lease's deadline or
/// as soon as the lock is known lost. The watchdog hears every new deadline,
/// to do the same if distlock itself dies or stalls.
async fn supervise(
    child: &mut Child,
    guard: &LockGuard,
    watchdog: &mut Watchdog,
    forwarded: &mut Forwarded,
    grace: Duration,
) -> Result<ExitStatus> {
    let group = watchdog.group();
    let mut state = guard.handle().watch();
    let tick = (guard.lease().ttl() / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut terminated = false;
    let mut killed = false;
    loop {
        let lease = guard.lease();
        watchdog.tell(lease.deadline().into_std()).await;
        let now_state = *state.borrow_and_update();
        let term_at = match now_state {
            LockState::AtRisk if !terminated => Some(
                lease
                    .deadline()
                    .checked_sub(grace)
                    .unwrap_or_else(Instant::now),
            ),
            _ => None,
        };
        if now_state == LockState::Lost && !killed {
            eprintln!(
                "distlock: lock \"{}\" was lost; killing the command",
                guard.name()
            );
            let _ = killpg(group, Signal::SIGKILL);
            killed = true;
        }
        tokio::select! {
            biased;
            status = child.wait() => {
                let status = status.map_err(|e| Error::backend(format!("waiting for the command: {e}")))?;
                if terminated || killed || guard.handle().is_lost() || lease.is_expired() {
                    return Err(Error::Lost { name: guard.name().to_string() });
                }
                return Ok(status);
            }
            sig = forwarded.next() => {
                let _ = killpg(group, sig);
            }
            changed = state.changed() => match (changed, *state.borrow()) {
                (Ok(()), LockState::AtRisk) => eprintln!(
                    "distlock: renewing lock \"{}\" is failing; it is still held for {}",
                    guard.name(),
                    human(guard.lease().remaining())
                ),
                (Ok(()), LockState::Held) => eprintln!("distlock: lock \"{}\" renewed again", guard.name()),
                _ => {}
            },
            () = sleep_until_some(term_at) => {
                eprintln!(
                    "distlock: renewing lock \"{}\" kept failing and {} of it is left; stopping the command (SIGTERM, SIGKILL when the lease runs out)",
                    guard.name(),
                    human(guard.lease().remaining())
                );
                let _ = killpg(group, Signal::SIGTERM);
                terminated = true;
            }
            () = tokio::time::sleep_until(lease.deadline()), if !killed => {
                eprintln!("distlock: lock \"{}\" ran out; killing the command", guard.name());
                let _ = killpg(group, Signal::SIGKILL);
                killed = true;
            }
            () = tokio::time::sleep(tick) => {}
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn release(guard: LockGuard) {
    let name = guard.name().clone();
    match guard.release().await {
        // An event of its own: the release span closes only when the
        // driver's last clone of it is dropped, which may be after exit.
        Ok(()) => tracing::info!(lock = %name, "released"),
        Err(e) => eprintln!("distlock: releasing lock \"{name}\": {e}"),
    }
}

fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::INTERNAL),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(exit::INTERNAL),
        (None, None) => exit::INTERNAL,
    }
}

fn human(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The signals passed on to the command.
///
/// The command runs in a process group of its own, so signals sent to
/// distlock's group (Ctrl-C from the terminal among them) do not reach it
/// unless passed on.
struct Forwarded {
    terminate: Option<tokio::signal::unix::Signal>,
    hangup: Option<tokio::signal::unix::Signal>,
    quit: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl Forwarded {
    fn install() -> Self {
        Self {
            terminate: signal(SignalKind::terminate()).ok(),
            hangup: signal(SignalKind::hangup()).ok(),
            quit: signal(SignalKind::quit()).ok(),
            interrupt: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The next signal to pass on.
    async fn next(&mut self) -> Signal {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.terminate) => Signal::SIGTERM,
            () = recv(&mut self.hangup) => Signal::SIGHUP,
            () = recv(&mut self.quit) => Signal::SIGQUIT,
            () = recv(&mut self.interrupt) => Signal::SIGINT,
        }
    }
}
