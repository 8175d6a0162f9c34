//! The command under a granted lease, from its start to the release: what
//! `run` does once it holds the lock, and `elect` once it leads.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{Error, LockGuard, LockState, Result};
use nix::sys::signal::Signal;
use tokio::process::{Child, Command};

use super::exit;
use super::group::Group;
use super::shared_args::{HoldArgs, URL_ENV};
use super::show::human;
use super::signals::Forwarded;
use super::supervise::{self, Supervisor};
use super::watchdog::Watchdog;

/// `--grace`, unless it is not shorter than `--ttl`: then the usage error,
/// said on stderr.
pub(crate) fn grace(hold: &HoldArgs) -> std::result::Result<Duration, u8> {
    let grace = hold.grace();
    if grace >= hold.ttl && !hold.ttl.is_zero() {
        eprintln!(
            "distlock: --grace ({}) must be shorter than --ttl ({}): the command is stopped while the lease still has --grace left",
            human(grace),
            human(hold.ttl)
        );
        return Err(exit::USAGE);
    }
    Ok(grace)
}

/// Starts the watchdog for one command, before its lease is asked for so
/// that its start-up is not taken out of the lease; the exit status if it
/// cannot, said on stderr.
pub(crate) async fn watchdog(grace: Duration) -> std::result::Result<Watchdog, u8> {
    Watchdog::start(grace).await.map_err(|e| {
        eprintln!(
            "distlock: cannot start the watchdog that stops the command if distlock dies: {e}"
        );
        exit::INTERNAL
    })
}

/// The exit status of distlock ended by `sig` before any command ran, as a
/// shell gives it.
pub(crate) fn signalled(sig: Signal) -> u8 {
    128 + u8::try_from(sig as i32).unwrap_or(0)
}

/// How a [`Job`] ended, with distlock's exit status for it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ended {
    /// The command ran and exited with this status (128+N if signal N
    /// ended it).
    Ran(u8),
    /// The command could not be started (not found, not executable).
    NotStarted(u8),
}

impl Ended {
    pub(crate) fn status(self) -> u8 {
        match self {
            Self::Ran(status) | Self::NotStarted(status) => status,
        }
    }
}

/// The command and what it runs with.
pub(crate) struct Job<'a> {
    pub(crate) hold: &'a HoldArgs,
    /// The store's URL, for `--pass-url`.
    pub(crate) url: &'a str,
    /// Environment besides DISTLOCK_NAME and DISTLOCK_TOKEN.
    pub(crate) env: &'a [(&'static str, &'a str)],
}

impl Job<'_> {
    /// Runs the command under `guard`, keeps it inside the lease, stops what
    /// it leaves running, and releases: how it ended, or `Err(Lost)` if it
    /// was stopped for the lease's sake (or not started: too little lease
    /// left).
    pub(crate) async fn run(
        &self,
        guard: LockGuard,
        grace: Duration,
        signals: &mut Forwarded,
        watchdog: &mut Watchdog,
    ) -> Result<Ended> {
        let name = guard.name().clone();
        // A grant whose reply came late may have too little lease left to
        // run anything under it and still stop it in time.
        let lease = guard.lease();
        if guard.state() != LockState::Held
            || lease.remaining() <= supervise::grace_for(&lease, grace)
        {
            let _ = guard.release().await;
            eprintln!(
                "distlock: lock \"{name}\" was granted with too little of its lease left; not running the command"
            );
            return Err(Error::lost(name.to_string()));
        }
        supervise::tell(watchdog, &lease, grace).await;
        let mut child = match self.spawn(&guard, watchdog.group()) {
            Ok(child) => child,
            Err((status, message)) => {
                eprintln!("distlock: {message}");
                release(guard).await;
                return Ok(Ended::NotStarted(status));
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
                Ok(Ended::Ran(status_code(status)))
            }
            Err(stopped) => {
                let _ = guard.release().await;
                Err(stopped)
            }
        }
    }

    /// Starts the command in the watchdog's process group, so that one
    /// signal to the group reaches the command and every process it starts.
    fn spawn(&self, guard: &LockGuard, group: Group) -> std::result::Result<Child, (u8, String)> {
        let (program, rest) = self
            .hold
            .command
            .split_first()
            .ok_or((exit::USAGE, "no command given".to_owned()))?;
        let mut command = Command::new(program);
        command
            .args(rest)
            .env("DISTLOCK_NAME", guard.name().as_str())
            .env("DISTLOCK_TOKEN", guard.token().to_string())
            .envs(self.env.iter().copied())
            .process_group(group.0.as_raw());
        if self.hold.pass_url {
            command.env(URL_ENV, self.url);
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
