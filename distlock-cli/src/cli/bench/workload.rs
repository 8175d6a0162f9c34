//! The seven workloads, each written once against [`Contender`] and bounded
//! by a deadline, so every run stops by itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::Result;
use distlock::backend::OwnerToken;
use serde::Serialize;

use super::contender::Contender;
use super::stats::{Distribution, Samples};

mod clients;
mod election;

pub(crate) use clients::HOLD;
use clients::{
    Baton, Relay, Tally, clients, hand_offs, pairs, pairs_on, permit_waits, side_waits, waits,
};
pub(crate) use election::{DYING_TTL, FAILOVERS};

/// One workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Workload {
    /// One client, acquire + release pairs on one name.
    Uncontended,
    /// Every client on one name, releasing at once.
    Contended,
    /// Every client on one name, each release passed to a waiter.
    HandOff,
    /// Every client on one name, each holding 2 ms ([`HOLD`]), counting the
    /// waiters' attempts.
    #[serde(rename = "wake-ups")]
    #[value(name = "wake-ups")]
    Wakeups,
    /// Every client on its share of several names.
    ManyNames,
    /// Every client on one semaphore of half as many permits, releasing
    /// at once.
    Semaphore,
    /// Every client on one read-write lock, a quarter of them (at least
    /// one) writers, each releasing as soon as it holds.
    ReadWrite,
    /// Every client campaigns in one election, each leader resigning after
    /// 2 ms ([`HOLD`]); then leaders that die without resigning, and their
    /// standbys.
    Election,
}

/// The parameters every workload shares.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) clients: usize,
    pub(crate) names: usize,
    /// The wall time of each workload, shared by the contenders.
    pub(crate) duration: Duration,
    /// Each contender runs each workload in this many slices, taking turns
    /// with the others, so that a machine that slows down or speeds up
    /// during the run (disk flushes, the WAL growing, other load) weighs on
    /// every contender alike instead of on whichever ran at that moment.
    pub(crate) slices: u32,
    pub(crate) slice: Duration,
    /// Keeps this run's lock names apart from earlier runs' (a run that was
    /// killed may have left a name held until its TTL).
    pub(crate) run_id: String,
    /// Where the next many-names slice starts in each client's names.
    cursor: AtomicUsize,
}

impl Plan {
    /// A plan of slices of about `slice` each.
    pub(crate) fn new(
        clients: usize,
        names: usize,
        duration: Duration,
        contenders: usize,
        slice: Duration,
    ) -> Self {
        let share = duration / u32::try_from(contenders.max(1)).unwrap_or(u32::MAX);
        let slices = (share.as_secs_f64() / slice.as_secs_f64()).round().max(1.0) as u32;
        Self {
            clients,
            names,
            duration,
            slices,
            slice: share / slices,
            run_id: OwnerToken::random().short(),
            cursor: AtomicUsize::new(0),
        }
    }

    /// The semaphore workload's permits: half the clients (at least one),
    /// so that there are always more clients than permits.
    pub(crate) fn permits(&self) -> u32 {
        u32::try_from(self.clients / 2).unwrap_or(u32::MAX).max(1)
    }

    /// The read-write workload's writers: a quarter of the clients, at
    /// least one; the others read.
    pub(crate) fn writers(&self) -> usize {
        (self.clients / 4).max(1)
    }

    /// Each contender's time in each workload.
    pub(crate) fn share(&self) -> Duration {
        self.slice * self.slices
    }

    fn name(&self, workload: Workload, index: usize) -> String {
        format!("bench.{}.{}.{index}", self.run_id, workload.id())
    }

    /// Each client's names in the many-names workload: client i takes
    /// names i, i + n, i + 2n, … (mod K, n clients), starting where the
    /// last slice stopped, so a run spreads over all K names; when K ≤ n,
    /// client i keeps to name i mod K. Made before the clock starts, up to
    /// a bound the slice cannot use up.
    fn names_of_clients(&self, workload: Workload) -> Vec<Arc<[String]>> {
        const MOST: usize = 1 << 16;
        let (n, k) = (self.clients, self.names.max(1));
        let each = k.div_ceil(n).clamp(1, MOST);
        let start = if k > n {
            self.cursor.load(Ordering::Relaxed)
        } else {
            0
        };
        (0..n)
            .map(|i| {
                (0..each)
                    .map(|j| self.name(workload, (i + (start + j) * n) % k))
                    .collect()
            })
            .collect()
    }
}

/// What one contender did in one workload.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Run {
    /// The contender's column name.
    pub(crate) subject: String,
    pub(crate) elapsed_ms: f64,
    /// Grants, each released before the next acquire of the same client.
    pub(crate) acquisitions: u64,
    /// Read-write only: how many of the grants were writes (the rest were
    /// reads).
    pub(crate) writes: Option<u64>,
    /// Read-write only: the writers' acquire waits (`latency` holds the
    /// readers').
    pub(crate) write_wait: Option<Distribution>,
    pub(crate) per_client: Vec<u64>,
    /// The workload's latency (see [`Workload::latency`]).
    pub(crate) latency: Option<Distribution>,
    /// The acquire call alone, median, in µs (pair workloads only). The
    /// floor's, uncontended, is one command: its round trip.
    pub(crate) acquire_p50_us: Option<f64>,
    /// Attempts that found the lock held, where the contender counts them.
    pub(crate) busy_attempts: Option<u64>,
    /// Release notices to local waiters, where the contender counts them.
    pub(crate) notices: Option<u64>,
    /// Election only: from the call that took a dying leader's lease to its
    /// standby leading (see [`failovers`]).
    pub(crate) failover: Option<Distribution>,
    /// The TTL of the dying leaders' leases, in ms.
    pub(crate) failover_ttl_ms: Option<f64>,
}

impl Run {
    /// Acquisitions per second.
    pub(crate) fn rate(&self) -> f64 {
        self.acquisitions as f64 / (self.elapsed_ms / 1e3)
    }

    /// `count` per acquisition (each acquisition is released once).
    pub(crate) fn per_release(&self, count: Option<u64>) -> Option<f64> {
        count
            .filter(|_| self.acquisitions > 0)
            .map(|c| c as f64 / self.acquisitions as f64)
    }

    /// The most acquisitions of one client over the fewest; `None` if a
    /// client got none.
    pub(crate) fn fairness(&self) -> Option<f64> {
        let most = *self.per_client.iter().max()?;
        let fewest = *self.per_client.iter().min()?;
        (fewest > 0).then(|| most as f64 / fewest as f64)
    }
}

impl Workload {
    /// In the order they run.
    pub(crate) const ALL: [Workload; 8] = [
        Workload::Uncontended,
        Workload::Contended,
        Workload::HandOff,
        Workload::Wakeups,
        Workload::ManyNames,
        Workload::Semaphore,
        Workload::ReadWrite,
        Workload::Election,
    ];

    pub(crate) fn id(self) -> &'static str {
        match self {
            Workload::Uncontended => "uncontended",
            Workload::Contended => "contended",
            Workload::HandOff => "hand-off",
            Workload::Wakeups => "wake-ups",
            Workload::ManyNames => "many-names",
            Workload::Semaphore => "semaphore",
            Workload::ReadWrite => "read-write",
            Workload::Election => "election",
        }
    }

    /// What the workload does, for the report.
    pub(crate) fn describe(self, plan: &Plan) -> String {
        let (n, k, hold) = (plan.clients, plan.names, HOLD.as_millis());
        match self {
            Workload::Uncontended => "1 client: acquire + release pairs on one name".to_owned(),
            Workload::Contended => {
                format!("{n} clients on one name, each releasing as soon as it holds")
            }
            Workload::HandOff => format!(
                "{n} clients on one name; a holder keeps the lock {hold} ms, releases, and sits \
                 out until another client holds it"
            ),
            Workload::Wakeups => format!(
                "{n} clients on one name, each holding {hold} ms; counts the waiters' attempts \
                 that find the lock held"
            ),
            Workload::ManyNames if k > n => format!(
                "{n} clients on {k} names (client i walks names i, i + {n}, … mod {k}): \
                 acquire + release"
            ),
            Workload::ManyNames => {
                format!("{n} clients on {k} names (client i on name i mod {k}): acquire + release")
            }
            Workload::Semaphore => format!(
                "{n} clients on one semaphore of {} permits, each releasing as soon as it holds",
                plan.permits()
            ),
            Workload::ReadWrite => format!(
                "{n} clients on one read-write lock, {} of them writers and the others readers, \
                 each releasing as soon as it holds",
                plan.writers()
            ),
            Workload::Election => format!(
                "{n} clients campaign in one election; a leader resigns after {hold} ms and sits \
                 out until another client leads. Then {FAILOVERS} leaders, each in an election of \
                 its own, take the lead on a lease of {} s (or the backend's shortest TTL) that \
                 nothing renews or releases, and a standby campaigns in each",
                DYING_TTL.as_secs_f64()
            ),
        }
    }

    /// What the latency distribution of this workload measures.
    pub(crate) fn latency(self) -> &'static str {
        match self {
            Workload::Uncontended | Workload::ManyNames => "acquire + release pair",
            Workload::Contended | Workload::Wakeups | Workload::Semaphore => "acquire wait",
            Workload::HandOff => "release call → next holder",
            Workload::ReadWrite => "reader's acquire wait",
            Workload::Election => "resign call → next leader",
        }
    }

    /// Runs one slice of the workload on `contender`, for `plan.slice`.
    pub(crate) async fn slice(self, contender: &Arc<dyn Contender>, plan: &Plan) -> Result<Slice> {
        let before = contender.wakeups();
        let n = match self {
            Workload::Uncontended => 1,
            _ => plan.clients,
        };
        // Every client's sample memory, taken before the clock starts.
        let tallies: Vec<Tally> = (0..n).map(|_| Tally::default()).collect();
        let mine: Vec<Arc<[String]>> = match self {
            Workload::ManyNames => plan.names_of_clients(self),
            _ => Vec::new(),
        };
        let started = Instant::now();
        let until = started + plan.slice;
        let one_name = plan.name(self, 0);
        let tallies = match self {
            Workload::Uncontended => {
                clients(tallies, |_, t| {
                    pairs(contender.clone(), one_name.clone(), until, t)
                })
                .await
            }
            Workload::Contended => {
                clients(tallies, |_, t| {
                    waits(
                        contender.clone(),
                        one_name.clone(),
                        until,
                        Duration::ZERO,
                        t,
                    )
                })
                .await
            }
            Workload::HandOff | Workload::Election => {
                // An election hands over as the lock does, through
                // `resign` and `campaign` instead of `release` and `lock`.
                let baton = if self == Workload::Election {
                    Baton::Lead
                } else {
                    Baton::Lock
                };
                let relay = Arc::new(Relay::default());
                clients(tallies, |me, t| {
                    hand_offs(
                        contender.clone(),
                        one_name.clone(),
                        until,
                        relay.clone(),
                        me,
                        baton,
                        t,
                    )
                })
                .await
            }
            Workload::Wakeups => {
                clients(tallies, |_, t| {
                    waits(contender.clone(), one_name.clone(), until, HOLD, t)
                })
                .await
            }
            Workload::ManyNames => {
                clients(tallies, |i, t| {
                    pairs_on(contender.clone(), mine[i].clone(), until, t)
                })
                .await
            }
            Workload::Semaphore => {
                let permits = plan.permits();
                clients(tallies, |_, t| {
                    permit_waits(contender.clone(), one_name.clone(), permits, until, t)
                })
                .await
            }
            Workload::ReadWrite => {
                let writers = plan.writers();
                clients(tallies, |i, t| {
                    side_waits(
                        contender.clone(),
                        one_name.clone(),
                        i,
                        i < writers,
                        until,
                        t,
                    )
                })
                .await
            }
        }?;
        let elapsed = started.elapsed();
        if self == Workload::ManyNames {
            let most = tallies.iter().map(|t| t.acquisitions).max().unwrap_or(0);
            plan.cursor
                .fetch_add(usize::try_from(most).unwrap_or(0), Ordering::Relaxed);
        }
        let after = contender.wakeups();
        let since = |a: Option<u64>, b: Option<u64>| Some(a? - b?);
        let mut slice = Slice {
            elapsed,
            per_client: tallies.iter().map(|t| t.acquisitions).collect(),
            writes: (self == Workload::ReadWrite).then(|| tallies.iter().map(|t| t.writes).sum()),
            busy_attempts: since(after.busy_attempts, before.busy_attempts),
            notices: since(after.notices, before.notices),
            ..Slice::default()
        };
        for t in &tallies {
            slice.latencies.merge(&t.latencies);
            slice.acquire_latencies.merge(&t.acquire_latencies);
            slice.write_latencies.merge(&t.write_latencies);
        }
        Ok(slice)
    }
}

/// The election workload's failover part on `contender`: [`FAILOVERS`]
/// leaders that die, each in an election of its own (names 1… of the
/// workload; name 0 is the resign part's), on leases of `ttl`, and their
/// standbys. Their leases must run out first, so the samples are taken at
/// once: the part costs one TTL per contender. `None` where the contender
/// cannot leave a lease to expire.
pub(crate) async fn failovers(
    contender: &Arc<dyn Contender>,
    plan: &Plan,
    ttl: Duration,
) -> Result<Option<Slice>> {
    let names = (1..=FAILOVERS)
        .map(|i| plan.name(Workload::Election, i))
        .collect();
    let Some(dying) = election::dying_leaders(contender, names, ttl).await? else {
        return Ok(None);
    };
    Ok(Some(Slice {
        failovers: dying.samples,
        failover_ttl: Some(dying.ttl),
        ..Slice::default()
    }))
}

/// What one contender did in one or more slices of a workload.
#[derive(Debug, Default)]
pub(crate) struct Slice {
    elapsed: Duration,
    per_client: Vec<u64>,
    writes: Option<u64>,
    latencies: Samples,
    acquire_latencies: Samples,
    write_latencies: Samples,
    busy_attempts: Option<u64>,
    notices: Option<u64>,
    failovers: Samples,
    failover_ttl: Option<Duration>,
}

impl Slice {
    /// Adds a later slice of the same contender to this one.
    pub(crate) fn merge(&mut self, next: Slice) {
        self.elapsed += next.elapsed;
        if self.per_client.len() < next.per_client.len() {
            self.per_client.resize(next.per_client.len(), 0);
        }
        for (total, more) in self.per_client.iter_mut().zip(next.per_client) {
            *total += more;
        }
        self.latencies.merge(&next.latencies);
        self.acquire_latencies.merge(&next.acquire_latencies);
        self.write_latencies.merge(&next.write_latencies);
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.busy_attempts = add(self.busy_attempts, next.busy_attempts);
        self.notices = add(self.notices, next.notices);
        self.writes = add(self.writes, next.writes);
        self.failovers.merge(&next.failovers);
        self.failover_ttl = next.failover_ttl.or(self.failover_ttl);
    }

    /// The summary of all the slices, under the contender's column name.
    pub(crate) fn into_run(self, subject: String) -> Run {
        self.run(subject, true)
    }

    /// The summary of this one slice, to pair with the floor's slice of the
    /// same round; without the percentile curve, which only the totals draw.
    pub(crate) fn summary(&self, subject: &str) -> Run {
        self.run(subject.to_owned(), false)
    }

    fn run(&self, subject: String, curve: bool) -> Run {
        Run {
            subject,
            elapsed_ms: self.elapsed.as_secs_f64() * 1e3,
            acquisitions: self.per_client.iter().sum(),
            per_client: self.per_client.clone(),
            latency: Distribution::of(&self.latencies, curve),
            writes: self.writes,
            write_wait: Distribution::of(&self.write_latencies, false),
            acquire_p50_us: self.acquire_latencies.p50_us(),
            busy_attempts: self.busy_attempts,
            notices: self.notices,
            // A handful of samples: no curve to draw.
            failover: Distribution::of(&self.failovers, false),
            failover_ttl_ms: self.failover_ttl.map(|t| t.as_secs_f64() * 1e3),
        }
    }
}

#[cfg(test)]
mod tests;
