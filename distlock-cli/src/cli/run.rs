//! `distlock run`: hold a lock while a command runs.

use std::time::Duration;

use distlock::backend::acquire_kind;
use distlock::{AcquireOptions, Error, LockGuard, LockKind, LockName, Locker, Result, Wait};

use super::args::RunArgs;
use super::job::{self, Job};
use super::show::human;
use super::signals::Forwarded;
use super::watchdog::Watchdog;

pub(crate) async fn run(args: RunArgs) -> Result<u8> {
    let grace = match job::grace(&args.hold) {
        Ok(grace) => grace,
        Err(status) => return Ok(status),
    };
    let name = LockName::new(&args.backend.name)?;
    // Installed before anything is spawned, so a signal meant for the
    // command is never lost to the default action (which would end distlock
    // and leave the command unsupervised).
    let mut signals = Forwarded::install();
    let mut watchdog = match job::watchdog(grace).await {
        Ok(w) => w,
        Err(status) => return Ok(status),
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
    let opts = AcquireOptions::with_ttl(args.hold.ttl);
    let wait = args.hold.wait();
    // A signal while waiting ends the wait; the acquire is cancel-safe.
    let guard = tokio::select! {
        guard = acquire(&locker, name, args.kind(), opts, wait) => guard?,
        sig = signals.next() => {
            eprintln!("distlock: {sig} while waiting for lock \"{name}\"; giving up");
            return Ok(job::signalled(sig));
        }
    };
    let job = Job {
        hold: &args.hold,
        url: &args.backend.url,
        env: &[],
    };
    Ok(job.run(guard, grace, signals, watchdog).await?.status())
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
