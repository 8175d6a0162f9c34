//! `distlock run`: hold a lock while a command runs.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{AcquireOptions, Error, LockGuard, LockName, LockState, Locker, Result, Wait};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::args::RunArgs;
use super::exit;

pub(crate) async fn run(args: RunArgs) -> Result<u8> {
    let name = LockName::new(&args.backend.name)?;
    let locker = distlock::connect(&args.backend.url).await?;
    let wait = match (args.no_wait, args.wait) {
        (true, _) => Wait::No,
        (false, Some(d)) => Wait::For(d),
        (false, None) => Wait::Forever,
    };
    let opts = AcquireOptions::with_ttl(args.ttl);
    let guard = acquire(&locker, &name, opts, wait).await?;

    let mut child = match spawn(&args, &guard) {
        Ok(child) => child,
        Err((status, message)) => {
            eprintln!("distlock: {message}");
            release(guard).await;
            return Ok(status);
        }
    };
    match supervise(&mut child, &guard, args.grace).await {
        Ok(status) => {
            release(guard).await;
            Ok(status_code(status))
        }
        Err(lost) => {
            let _ = guard.release().await;
            Err(lost)
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

fn spawn(args: &RunArgs, guard: &LockGuard) -> std::result::Result<Child, (u8, String)> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or((exit::USAGE, "no command given".to_owned()))?;
    Command::new(program)
        .args(rest)
        .env("DISTLOCK_NAME", guard.name().as_str())
        .env("DISTLOCK_TOKEN", guard.token().to_string())
        .spawn()
        .map_err(|e| {
            let shown = program.to_string_lossy();
            match e.kind() {
                ErrorKind::NotFound => (exit::NOT_FOUND, format!("command not found: {shown}")),
                _ => (exit::CANNOT_EXECUTE, format!("cannot execute {shown}: {e}")),
            }
        })
}

/// Waits for the command, forwarding termination signals, and stops it if
/// the lock is lost.
async fn supervise(child: &mut Child, guard: &LockGuard, grace: Duration) -> Result<ExitStatus> {
    let mut forwarded = Forwarded::install();
    let mut state = guard.handle().watch();
    loop {
        tokio::select! {
            status = child.wait() => return status.map_err(|e| Error::backend(format!("waiting for the command: {e}"))),
            sig = forwarded.next() => {
                if let (Some(sig), Some(pid)) = (sig, child_pid(child)) {
                    let _ = kill(pid, sig);
                }
            }
            changed = state.changed() => {
                let now = *state.borrow_and_update();
                match (changed, now) {
                    (Ok(()), LockState::AtRisk) => eprintln!(
                        "distlock: renewing lock \"{}\" is failing; it is still held for {}",
                        guard.name(),
                        human(guard.lease().remaining())
                    ),
                    (Ok(()), LockState::Held) => eprintln!("distlock: lock \"{}\" renewed again", guard.name()),
                    _ => {
                        stop(child, grace, guard.name()).await;
                        return Err(Error::Lost { name: guard.name().to_string() });
                    }
                }
            }
        }
    }
}

async fn stop(child: &mut Child, grace: Duration, name: &LockName) {
    eprintln!(
        "distlock: lock \"{name}\" was lost; stopping the command (SIGTERM, SIGKILL after {})",
        human(grace)
    );
    if let Some(pid) = child_pid(child) {
        let _ = kill(pid, Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

async fn release(guard: LockGuard) {
    let name = guard.name().clone();
    if let Err(e) = guard.release().await {
        eprintln!("distlock: releasing lock \"{name}\": {e}");
    }
}

fn child_pid(child: &Child) -> Option<Pid> {
    child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
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

    /// The next signal to pass on. Ctrl-C reaches the command from the
    /// terminal by itself, so SIGINT is only absorbed: distlock stays alive to
    /// release the lock once the command ends.
    async fn next(&mut self) -> Option<Signal> {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.terminate) => Some(Signal::SIGTERM),
            () = recv(&mut self.hangup) => Some(Signal::SIGHUP),
            () = recv(&mut self.quit) => Some(Signal::SIGQUIT),
            () = recv(&mut self.interrupt) => None,
        }
    }
}
