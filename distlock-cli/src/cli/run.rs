//! `distlock run`: hold a lock while a command runs.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::backend::acquire_kind;
use distlock::{
    AcquireOptions, Error, LockGuard, LockKind, LockName, LockState, Locker, Result, Wait,
};
use tokio::process::{Child, Command};

use super::args::{RunArgs, URL_ENV};
use super::exit;
use super::group::Group;
use super::show::human;
use super::signals::Forwarded;
use super::supervise::{self, Supervisor};
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
    let mut signals = Forwarded::install();
    // Started before the lock is asked for, so that its start-up is not
    // taken out of the lease.
    let mut watchdog = match Watchdog::start(grace).await {
        Ok(w) => w,
        Err(e) => {
            eprintln!(
                "distlock: cannot start the watchdog that stops the command if distlock dies: {e}"
            );
            return Ok(exit::INTERNAL);
        }
    };
    let outcome = run_locked(&args, &name, grace, &mut signals, &mut watchdog).await;
    watchdog.dismiss().await;
    outcome
}

/// Everything from connecting to releasing, with the watchdog running.
async fn run_locked(
    args: &RunArgs,
    name: &LockName,
    grace: Duration,
    signals: &mut Forwarded,
    watchdog: &mut Watchdog,
) -> Result<u8> {
    let locker = distlock::connect(&args.backend.url).await?;
    let wait = match (args.no_wait, args.wait) {
        (true, _) => Wait::No,
        (false, Some(d)) => Wait::For(d),
        (false, None) => Wait::Forever,
    };
    let opts = AcquireOptions::with_ttl(args.ttl);
    // A signal while waiting ends the wait; the acquire is cancel-safe.
    let guard = tokio::select! {
        guard = acquire(&locker, name, args.kind(), opts, wait) => guard?,
        sig = signals.next() => {
            eprintln!("distlock: {sig} while waiting for lock \"{name}\"; giving up");
            return Ok(128 + u8::try_from(sig as i32).unwrap_or(0));
        }
    };
    // A grant whose reply came late may have too little lease left to run
    // anything under it and still stop it in time.
    let lease = guard.lease();
    if guard.state() != LockState::Held || lease.remaining() <= supervise::grace_for(&lease, grace)
    {
        let _ = guard.release().await;
        eprintln!(
            "distlock: lock \"{name}\" was granted with too little of its lease left; not running the command"
        );
        return Err(Error::lost(name.to_string()));
    }
    supervise::tell(watchdog, &lease, grace).await;
    let mut child = match spawn(args, &guard, watchdog.group()) {
        Ok(child) => child,
        Err((status, message)) => {
            eprintln!("distlock: {message}");
            release(guard).await;
            return Ok(status);
        }
    };
    let outcome = Supervisor {
        guard: &guard,
        watchdog,
        signals,
        grace,
    }
    .run(&mut child)
    .await;
    supervise::stop_leftovers(&guard, watchdog, grace).await;
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
    kind: LockKind,
    opts: AcquireOptions,
    wait: Wait,
) -> Result<LockGuard> {
    match acquire_kind(locker, name, kind, opts.wait(Wait::No)).await {
        Err(Error::Busy { .. }) if wait != Wait::No => {}
        other => return other,
    }
    // Only the lock has one holder to name.
    let holder = match locker.holder(name).await {
        Ok(Some(h)) if kind == LockKind::Exclusive => match h.token {
            Some(token) => format!(" (held by owner {}…, fencing token {token})", h.owner),
            None => format!(" (held by owner {}…)", h.owner),
        },
        _ => String::new(),
    };
    let limit = match wait {
        Wait::For(d) => format!(" for up to {}", human(d)),
        _ => String::new(),
    };
    let what = match kind {
        LockKind::Exclusive => "lock".to_owned(),
        kind => format!("a {kind} of"),
    };
    eprintln!("distlock: waiting{limit} for {what} \"{name}\"{holder}");
    acquire_kind(locker, name, kind, opts.wait(wait)).await
}

/// Starts the command in the watchdog's process group, so that one signal
/// to the group reaches the command and every process it starts.
fn spawn(
    args: &RunArgs,
    guard: &LockGuard,
    group: Group,
) -> std::result::Result<Child, (u8, String)> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or((exit::USAGE, "no command given".to_owned()))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("DISTLOCK_NAME", guard.name().as_str())
        .env("DISTLOCK_TOKEN", guard.token().to_string())
        .process_group(group.0.as_raw());
    if args.pass_url {
        command.env(URL_ENV, &*args.backend.url);
    } else {
        command.env_remove(URL_ENV);
    }
    command.spawn().map_err(|e| {
        let shown = program.to_string_lossy();
        match e.kind() {
            ErrorKind::NotFound => (exit::NOT_FOUND, format!("command not found: {shown}")),
            _ => (exit::CANNOT_EXECUTE, format!("cannot execute {shown}: {e}")),
        }
    })
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
