//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use distlock::LockKind;

pub(crate) use super::bench::Workload;

pub(crate) use super::shared_args::{Backend, HoldArgs, StoreUrl, URL_ENV};
use super::shared_args::{duration, positive_duration};

/// Run commands under a distributed lock.
///
/// distlock holds a named lock while a command runs, renews it in the
/// background, and stops the command if the lock is lost. The same lock
/// names work across hosts when the backend is a shared server; the default
/// backend is an SQLite file in the current directory, which needs no server.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, max_term_width = 100)]
pub(crate) struct Cli {
    /// More output on stderr: -v shows acquire, renew and release as they
    /// happen, -vv and -vvv show more detail. RUST_LOG overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Hold a lock while a command runs.
    ///
    /// The command gets DISTLOCK_NAME and DISTLOCK_TOKEN (the fencing token)
    /// in its environment, and no DISTLOCK_URL (the lock store's credentials
    /// are not the command's) unless --pass-url is given. It runs in a process group of its own, which
    /// gets SIGTERM when renewal keeps failing and only the grace is left,
    /// and SIGKILL when the lease runs out or the lock is lost; a watchdog
    /// process does the same if distlock dies or stalls. SIGTERM, SIGHUP,
    /// SIGQUIT and SIGINT sent to distlock are passed on to the group;
    /// Ctrl-Z stops the command and distlock together. The command cannot
    /// use the terminal.
    Run(RunArgs),

    /// Show who holds a lock. Exits 0 if it is free, 75 if it is held.
    Status(StatusArgs),

    /// Lead an election while a command runs; with --again, stand by to lead
    /// again.
    ///
    /// Campaigns to lead the election --name, one leader at a time among
    /// every candidate of the name, and runs the command once it leads, as
    /// `run` runs one under a lock: in a process group of its own with a
    /// watchdog, stopped (SIGTERM while --grace is left, SIGKILL) when the
    /// lead is lost or distlock dies. Besides DISTLOCK_NAME, the command gets
    /// DISTLOCK_TOKEN, the term (the fencing token of this leadership,
    /// greater for every new leader where the backend's tokens are strict),
    /// and DISTLOCK_LEADER, the --value proclaimed. distlock resigns when
    /// the command ends, and with --again campaigns again, after a lost lead
    /// too. SIGTERM, SIGHUP, SIGQUIT and SIGINT are passed on to the command;
    /// once it has ended, distlock resigns and exits without campaigning
    /// again.
    Elect(ElectArgs),

    /// Show who leads an election, or follow each change with --watch.
    /// Exits 0 if nobody leads, 75 if somebody does.
    Leader(LeaderArgs),

    /// Measure a backend: the library against the backend's raw primitive.
    ///
    /// Runs eight workloads (uncontended, contended, hand-off, wake-ups per
    /// release, many names, a semaphore with half as many permits as
    /// clients where the backend keeps semaphores, a read-write lock with a
    /// quarter of the clients writing where it keeps read-write locks, and
    /// an election where it keeps elections; --workload picks some) for
    /// --duration each, with the library and with the backend's bare
    /// acquire and release (the floor) taking turns, and reports every
    /// library result as a ratio to the floor. The semaphore's floor is
    /// that primitive on one lock name per permit; the read-write lock's,
    /// on one name per client (every read or write one acquire and one
    /// release, nothing shared or excluded); the election's is the bare
    /// lock, whoever holds it leading. The election
    /// reports the time from a leader's resign to the next leader, and the
    /// failover after 5 leaders die holding a lease of 1 s (or the backend's
    /// shortest TTL) that nothing renews: about one more TTL per contender.
    /// Prints a
    /// table and writes bench-BACKEND.json and bench-BACKEND.svg to --out.
    /// Lock names are unique to each run, so it can share a database with
    /// real locks, but it adds a few rows to it.
    Bench(BenchArgs),

    /// Measure what a lock service does to a fenced resource under faults.
    ///
    /// Starts --clients worker processes that take one lock over and over;
    /// each reads a fenced register (a file that serves only the highest
    /// fencing token it has seen) with its token, holds for a moment,
    /// writes the register back, and releases. With --permits N they take
    /// permits of a semaphore instead, and only hold; with --read-write,
    /// the sides of a read-write lock (writers as above, readers read the
    /// register and hold). With --pause or --kill, a holder is paused past
    /// its TTL (SIGSTOP, then SIGCONT) or killed and replaced, every
    /// 3×TTL. At the end one process takes the whole lock (every permit).
    /// Then it checks the history and prints what broke: holders beside
    /// each other against the lock's rule while their leases were valid,
    /// stale writes the fence let through, tokens out of order, lost
    /// writes, permits that never came back, and how long the lock took
    /// to come back. Exits 1 if the backend broke a promise it makes (any
    /// overlap or leaked permit; the tokens' order and the fence's figures
    /// when its tokens are strict). Server and network faults are yours to
    /// inject meanwhile.
    Torture(TortureArgs),

    /// Print a shell completion script.
    ///
    /// Made from this command line, so it completes every command and flag
    /// of this version. The examples say where each shell looks for one.
    Completions(CompletionsArgs),

    /// Print a man page, made from this command line.
    ///
    /// Prints distlock(1), or the page of one COMMAND (distlock-run(1), …),
    /// in roff; read it with `distlock man | man -l -`. With --out, writes
    /// every page into a directory instead, as a package installs them.
    Man(ManArgs),

    /// Internal: one worker process of `torture`.
    #[command(name = "__torture-worker", hide = true)]
    TortureWorker(TortureWorkerArgs),

    /// Internal: started by `run` to stop the command if distlock dies.
    #[command(name = "__watchdog", hide = true)]
    Watchdog(WatchdogArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) backend: Backend,

    /// Hold one of N permits of the semaphore --name instead of the lock:
    /// at most N commands run at once. Every caller of the name must pass
    /// the same N. The semaphore is not the lock of the same name.
    #[arg(long, value_name = "N", conflicts_with_all = ["read", "write"])]
    pub(crate) permits: Option<u32>,

    /// Hold the read side of the read-write lock --name: shared with other
    /// --read commands, never with a --write one; a reader does not start
    /// while a writer waits.
    #[arg(long, conflicts_with = "write")]
    pub(crate) read: bool,

    /// Hold the write side of the read-write lock --name: no reader and no
    /// other writer runs with it.
    #[arg(long)]
    pub(crate) write: bool,

    #[command(flatten)]
    pub(crate) hold: HoldArgs,
}

impl RunArgs {
    /// What `--permits`, `--read` or `--write` ask for; the lock without
    /// them.
    pub(crate) fn kind(&self) -> LockKind {
        match (self.permits, self.read, self.write) {
            (Some(permits), _, _) => LockKind::permit(permits),
            (None, true, _) => LockKind::Read,
            (None, false, true) => LockKind::Write,
            (None, false, false) => LockKind::Exclusive,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    pub(crate) backend: Backend,

    /// What this candidate proclaims while it leads: what `distlock leader`
    /// shows, and the command gets as DISTLOCK_LEADER; an identity such as
    /// an address, at most 4096 bytes [default: HOST:PID, this host's name
    /// and distlock's process id]
    #[arg(long)]
    pub(crate) value: Option<String>,

    /// Campaign again once the command has ended or the lead was lost, for
    /// as long as distlock runs: a standby that takes over when the leader
    /// dies. Campaigns start at most once a second; a signal that ends the
    /// command ends distlock too.
    #[arg(long, conflicts_with_all = ["wait", "no_wait"])]
    pub(crate) again: bool,

    #[command(flatten)]
    pub(crate) hold: HoldArgs,
}

#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    #[command(flatten)]
    pub(crate) backend: Backend,

    /// Print one line of JSON instead of a sentence:
    /// {"name":"scheduler","led":true,"value":"web-1:4242","term":42,
    /// "owner":"3f2a9c1b","expires_in_ms":27500}. term is the leader's
    /// fencing token; owner the first 8 hex digits of its owner token (null
    /// for a leader elected by another client, such as etcdctl elect);
    /// expires_in_ms the lease left by the server's clock, null where the
    /// backend cannot tell. While nobody leads, led is false and the other
    /// four null.
    #[arg(long)]
    pub(crate) json: bool,

    /// Print the leader now, then a line (or JSON object) at each change,
    /// as it happens, until interrupted (exit status 0).
    #[arg(long)]
    pub(crate) watch: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WatchdogArgs {
    /// The run's --grace.
    #[arg(long, value_parser = duration)]
    pub(crate) grace: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) backend: Backend,

    /// List the holders of the semaphore --name with N permits instead of
    /// the lock's holder (N as its users give it). The exit status is 75
    /// only when all N permits are taken.
    #[arg(long, value_name = "N", conflicts_with = "read_write")]
    pub(crate) permits: Option<u32>,

    /// List the holders of the read-write lock --name (its readers, or its
    /// writer) instead of the lock's holder. The exit status is 75 when
    /// anybody holds it (a writer would wait).
    #[arg(long)]
    pub(crate) read_write: bool,

    /// Print one line of JSON instead of a sentence:
    /// {"name":"deploy","held":true,"owner":"3f2a9c1b","token":42,"expires_in_ms":27500}.
    /// owner is the first 8 hex digits of the holder's owner token; token is
    /// the fencing token and expires_in_ms the lease left by the server's
    /// clock, each null where the backend cannot tell (Redlock keeps no
    /// token). A free lock has held false and the other three null. With
    /// --permits or --read-write: {"name":"pool","kind":"semaphore",
    /// "permits":2,"held":true,"holders":[{"owner":…,"token":…,
    /// "expires_in_ms":…,"side":"permit"}]}, side being "permit", "read" or
    /// "write". The exit status is the same as without --json.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The backend to measure: sqlite://PATH, memory://, … Query options
    /// such as ?ttl=10s or ?synchronous=normal apply to the floor too.
    /// Repeat it to measure several backends side by side in one run, taking
    /// turns round by round, with a comparison table, JSON and chart.
    #[arg(long, env = URL_ENV, hide_env_values = true, required = true)]
    pub(crate) url: Vec<StoreUrl>,

    /// Clients in every workload but uncontended (the election's
    /// candidates).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(2..=256))]
    pub(crate) clients: u16,

    /// How long each workload runs. The contenders (library, floor, any
    /// peers) share it, taking turns in slices of about 100 ms.
    #[arg(long, value_parser = positive_duration, default_value = "5s")]
    pub(crate) duration: Duration,

    /// About how long each slice is: the contenders take turns in slices
    /// of this long, every client starting afresh in each. Longer slices
    /// measure the steady state of many waiters rather than their arrival
    /// and departure.
    #[arg(long, value_parser = positive_duration, default_value = "100ms")]
    pub(crate) slice: Duration,

    /// Distinct lock names in the many-names workload (default: --clients).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) names: Option<u32>,

    /// Instead of the eight workloads: contended at 1, 4, 16, 64 and 256
    /// clients on one name, hand-off and wake-ups at 4 to 256, many-names at
    /// 10, 1,000 and 100,000 names; each point runs for --duration.
    /// Writes bench-sweep-BACKEND.json and .svg.
    #[arg(long)]
    pub(crate) sweep: bool,

    /// Run only this workload (repeat for several; default: all). With
    /// --sweep, only the sweep's workloads among these.
    #[arg(long, value_name = "WORKLOAD")]
    pub(crate) workload: Vec<Workload>,

    /// With --sweep: the client counts of the workloads on one name
    /// (default 1,4,16,64,256; hand-off and wake-ups skip 1).
    #[arg(long, value_name = "N,…", value_delimiter = ',', requires = "sweep",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) points: Vec<u16>,

    /// Where the JSON data file and the SVG chart go; created if missing.
    #[arg(long, default_value = "bench-results")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct TortureArgs {
    /// The lock service to measure: sqlite://PATH, redis://…, … The lock
    /// name is unique to the run.
    #[arg(long, env = URL_ENV, hide_env_values = true)]
    pub(crate) url: StoreUrl,

    /// Worker processes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(2..=256))]
    pub(crate) clients: u16,

    /// How long the workers take the lock.
    #[arg(long, value_parser = positive_duration, default_value = "30s")]
    pub(crate) duration: Duration,

    /// The lease each acquire asks for; holds last up to a fifth of it
    /// [default: 2s, or the backend's shortest TTL if longer: 4s on
    /// memcache]
    #[arg(long, value_parser = positive_duration)]
    pub(crate) ttl: Option<Duration>,

    /// Pause a holder (its whole process group) for 2×TTL every 3×TTL.
    #[arg(long, conflicts_with = "kill")]
    pub(crate) pause: bool,

    /// Kill a holder with SIGKILL every 3×TTL; a new worker replaces it.
    #[arg(long)]
    pub(crate) kill: bool,

    /// Measure a semaphore of N permits instead of the lock: at most N
    /// holders with valid leases at any instant, and all N permits back
    /// at the end. Its holders do not use the fenced register.
    #[arg(long, value_name = "N", conflicts_with = "read_write",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(LockKind::MAX_PERMITS)))]
    pub(crate) permits: Option<u32>,

    /// Measure a read-write lock instead of the lock: one acquisition in
    /// three writes (reads the register, writes it back), the others read
    /// it; no writer beside any other holder with a valid lease.
    #[arg(long)]
    pub(crate) read_write: bool,

    /// Measure an election instead of the lock: one leader at a time,
    /// writing the register with its term.
    #[arg(long, conflicts_with_all = ["permits", "read_write"])]
    pub(crate) election: bool,

    /// Print the figures as JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Keep the history (one event per line) in this directory.
    #[arg(long)]
    pub(crate) keep: Option<PathBuf>,
}

impl TortureArgs {
    /// The lock `--permits`, `--read-write` or `--election` ask for; the
    /// mutex without.
    pub(crate) fn lock(&self) -> distlock_torture::Lock {
        match (self.permits, self.read_write, self.election) {
            (Some(permits), _, _) => distlock_torture::Lock::Semaphore { permits },
            (None, true, _) => distlock_torture::Lock::ReadWrite,
            (None, false, true) => distlock_torture::Lock::Election,
            (None, false, false) => distlock_torture::Lock::Mutex,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The command whose page to print (default: distlock's own).
    #[arg(conflicts_with = "out")]
    pub(crate) command: Option<String>,

    /// Write distlock.1 and a page per command (distlock-run.1, …) into this
    /// directory, created if missing.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct TortureWorkerArgs {
    /// The worker's plan, as `key=value` arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) plan: Vec<String>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    #[test]
    fn debug_of_the_arguments_hides_the_store_password() {
        let cli = Cli::try_parse_from([
            "distlock",
            "run",
            "--url",
            "postgres://app:hunter2@db/locks",
            "--name",
            "x",
            "--",
            "true",
        ])
        .unwrap();
        let debug = format!("{cli:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("app:***@db"), "{debug}");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(&*run.backend.url, "postgres://app:hunter2@db/locks");
        assert!(!run.hold.pass_url);
    }
}
