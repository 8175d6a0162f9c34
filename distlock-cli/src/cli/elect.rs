//! `distlock elect`: lead an election while a command runs, and with
//! `--again` stand by to lead it again.
//!
//! A term is a `distlock run` of the command with the election's
//! leadership as its lock (the leadership is a lock of its own family):
//! the same watchdog, process group, grace and release, from `job`.

use std::time::Duration;

use distlock::{AcquireOptions, Error, Leader, LockGuard, LockName, Locker, Result, Wait};
use nix::sys::signal::Signal;
use tokio::time::{Instant, sleep_until};

use super::args::ElectArgs;
use super::job::{self, Ended, Job};
use super::show::human;
use super::signals::Forwarded;
use super::watchdog::Watchdog;

/// The least time between the starts of two campaigns of `--again`, so
/// that a command that fails at once does not make distlock spin.
const BETWEEN_CAMPAIGNS: Duration = Duration::from_secs(1);
/// The longest pause before campaigning again while the store fails.
const MAX_PAUSE: Duration = Duration::from_secs(30);

pub(crate) async fn elect(args: ElectArgs) -> Result<u8> {
    let grace = match job::grace(&args.hold) {
        Ok(grace) => grace,
        Err(status) => return Ok(status),
    };
    let name = LockName::new(&args.backend.name)?;
    let value = args.value.clone().unwrap_or_else(default_value);
    Leader::check_value(&value)?;
    // Before anything is spawned, as for `run`.
    let mut signals = Forwarded::install();
    let locker = distlock::connect(&args.backend.url).await?;
    let candidate = Candidate {
        args: &args,
        locker,
        name: &name,
        value: &value,
        grace,
    };
    let mut pause = BETWEEN_CAMPAIGNS;
    let mut started: Option<Instant> = None;
    loop {
        if let Some(started) = started {
            tokio::select! {
                () = sleep_until(started + pause) => {}
                sig = signals.next() => return Ok(job::signalled(sig)),
            }
        }
        started = Some(Instant::now());
        let mut watchdog = match job::watchdog(grace).await {
            Ok(w) => w,
            Err(status) => return Ok(status),
        };
        let outcome = candidate.term(&mut signals, &mut watchdog).await;
        watchdog.dismiss().await;
        let again = args.again && signals.ending().is_none();
        match outcome {
            Ok(Term::Signalled(sig)) => return Ok(job::signalled(sig)),
            Ok(Term::Ended(Ended::NotStarted(status))) => return Ok(status),
            Ok(Term::Ended(Ended::Ran(status))) if !again => return Ok(status),
            Ok(Term::Ended(Ended::Ran(status))) => {
                pause = BETWEEN_CAMPAIGNS;
                eprintln!("distlock: the command exited with status {status}; campaigning again");
            }
            Err(e) if !again => return Err(e),
            Err(Error::Lost { .. } | Error::NotHeld { .. }) => {
                pause = BETWEEN_CAMPAIGNS;
                eprintln!("distlock: lost the lead of election \"{name}\"; campaigning again");
            }
            // A store that is down comes back; a refusal that no retry can
            // change (a missing table, a denied right) ends the daemon.
            Err(e) if e.is_retryable() => {
                pause = (pause * 2).min(MAX_PAUSE);
                eprintln!("distlock: {e}; campaigning again in {}", human(pause));
            }
            Err(e) => return Err(e),
        }
    }
}

/// `HOST:PID`: this host's name and distlock's process id.
fn default_value() -> String {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// How one term ended.
enum Term {
    /// A signal came while campaigning: no command ran.
    Signalled(Signal),
    /// The command ran (or could not start) while leading.
    Ended(Ended),
}

/// One candidate of the election, as the command line describes it.
struct Candidate<'a> {
    args: &'a ElectArgs,
    locker: Locker,
    name: &'a LockName,
    value: &'a str,
    grace: Duration,
}

impl Candidate<'_> {
    /// Campaigns, then runs the command while leading, and resigns.
    async fn term(&self, signals: &mut Forwarded, watchdog: &mut Watchdog) -> Result<Term> {
        // A signal while campaigning ends the campaign, which is
        // cancel-safe: no candidacy is left behind.
        let guard = tokio::select! {
            guard = self.campaign() => guard?,
            sig = signals.next() => {
                eprintln!(
                    "distlock: {sig} while campaigning to lead election \"{}\"; giving up",
                    self.name
                );
                return Ok(Term::Signalled(sig));
            }
        };
        tracing::info!(election = %self.name, term = %guard.token(), "leading");
        let job = Job {
            hold: &self.args.hold,
            url: &self.args.backend.url,
            env: &[("DISTLOCK_LEADER", self.value)],
        };
        let ended = job.run(guard, self.grace, signals, watchdog).await?;
        Ok(Term::Ended(ended))
    }

    /// Leads, saying on stderr whom it waits for if somebody else does. The
    /// leadership as a lock guard: resigning is releasing it.
    async fn campaign(&self) -> Result<LockGuard> {
        let opts = AcquireOptions::with_ttl(self.args.hold.ttl);
        let wait = self.args.hold.wait();
        let value = self.value;
        let election = self.locker.election(self.name.as_str());
        match election.campaign_with(value, opts.wait(Wait::No)).await {
            Err(Error::Busy { .. }) if wait != Wait::No => {}
            other => return other.map(|leading| leading.into_guard()),
        }
        let leader = match election.leader().await {
            Ok(Some(l)) => format!(" (led by \"{}\", term {})", l.value, l.term),
            _ => String::new(),
        };
        let limit = match wait {
            Wait::For(d) => format!(" for up to {}", human(d)),
            _ => String::new(),
        };
        let name = self.name;
        eprintln!("distlock: waiting{limit} to lead election \"{name}\"{leader}");
        let leading = election.campaign_with(value, opts.wait(wait)).await?;
        Ok(leading.into_guard())
    }
}
