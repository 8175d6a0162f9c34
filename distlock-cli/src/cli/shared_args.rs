//! The options more than one command takes: where the lock store is, which
//! name, and how a command is held under a lease (`run` and `elect`).

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use distlock::Wait;

const DEFAULT_URL: &str = "sqlite://distlock.db";

/// The environment variable that gives `--url`.
pub(crate) const URL_ENV: &str = "DISTLOCK_URL";

/// A lock store's URL, which may hold a password: `Debug` shows it
/// redacted.
#[derive(Clone)]
pub(crate) struct StoreUrl(String);

impl std::ops::Deref for StoreUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&distlock::url::redact(&self.0))
    }
}

#[derive(Debug, Args)]
pub(crate) struct Backend {
    /// Where the locks live: sqlite://PATH, memory://, … Query options such
    /// as ?ttl=10s are accepted too. A password here shows in `ps`: give the
    /// URL in DISTLOCK_URL, or the password as ?password_file=PATH.
    #[arg(long, env = URL_ENV, default_value = DEFAULT_URL, hide_env_values = true)]
    pub(crate) url: StoreUrl,

    /// The lock (or election) name: 1-128 ASCII letters, digits, '-', '_',
    /// '.', ':'.
    #[arg(long, short = 'n')]
    pub(crate) name: String,
}

/// How a command runs under a lease: `run` holds a lock for it, `elect`
/// the lead of an election.
#[derive(Debug, Args)]
pub(crate) struct HoldArgs {
    /// Lease length; renewed every third of it while the command runs. A
    /// holder (or leader) that dies keeps the lock (or the lead) at most
    /// this long.
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub(crate) ttl: Duration,

    /// Wait at most this long for the lock, or to lead (default: as long as
    /// it takes).
    #[arg(long, value_parser = duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,

    /// Fail at once (status 75) if somebody else holds the lock, or leads.
    #[arg(long)]
    pub(crate) no_wait: bool,

    /// How long before the lease runs out the command gets SIGTERM when
    /// renewal keeps failing (at most a third of the lease granted); SIGKILL
    /// follows when the lease runs out. Must be shorter than --ttl [default:
    /// 10s or a third of --ttl, whichever is less]
    #[arg(long, value_parser = duration)]
    pub(crate) grace: Option<Duration>,

    /// Give the command the lock store's URL, password included, as
    /// DISTLOCK_URL. Without it the command gets no DISTLOCK_URL, even if
    /// distlock was given one: the lock store's credentials are not the
    /// command's.
    #[arg(long)]
    pub(crate) pass_url: bool,

    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

impl HoldArgs {
    /// `--grace`, or its default for this `--ttl`.
    pub(crate) fn grace(&self) -> Duration {
        self.grace
            .unwrap_or_else(|| (self.ttl / 3).min(Duration::from_secs(10)))
    }

    /// What `--wait` and `--no-wait` ask for.
    pub(crate) fn wait(&self) -> Wait {
        match (self.no_wait, self.wait) {
            (true, _) => Wait::No,
            (false, Some(d)) => Wait::For(d),
            (false, None) => Wait::Forever,
        }
    }
}

pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        Duration::ZERO => Err("must be more than zero".to_owned()),
        d => Ok(d),
    }
}

pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    distlock::url::parse_duration(text)
}
