//! What each client of a workload does while its slice runs, and the
//! tally it keeps: the loops the workloads are made of.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::{Error, Result};
use tokio::sync::watch;

use crate::cli::bench::contender::Contender;
use crate::cli::bench::stats::Samples;

/// How long a holder keeps the lock in the hand-off and wake-ups workloads,
/// so that the other clients are surely waiting when it lets go.
pub(crate) const HOLD: Duration = Duration::from_millis(2);

/// One client's share of a run. Made before the slice starts: recording a
/// sample into it allocates nothing.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) acquisitions: u64,
    pub(super) latencies: Samples,
    pub(super) acquire_latencies: Samples,
    /// Read-write only: the writer's grants and waits (a reader's go to
    /// `acquisitions` and `latencies` alone).
    pub(super) writes: u64,
    pub(super) write_latencies: Samples,
}

/// Runs `n` clients as tasks, so that every contender is driven from the
/// runtime's worker threads the same way, and collects their tallies.
pub(super) async fn clients<F, Fut>(tallies: Vec<Tally>, client: F) -> Result<Vec<Tally>>
where
    F: Fn(usize, Tally) -> Fut,
    Fut: Future<Output = Result<Tally>> + Send + 'static,
{
    let n = tallies.len();
    let tasks: Vec<_> = tallies
        .into_iter()
        .enumerate()
        .map(|(i, t)| tokio::spawn(client(i, t)))
        .collect();
    let mut tallies = Vec::with_capacity(n);
    for task in tasks {
        let tally = task
            .await
            .map_err(|e| Error::backend(format!("a benchmark client failed: {e}")))??;
        tallies.push(tally);
    }
    Ok(tallies)
}

/// Acquire + release pairs on one name, timing each pair.
pub(super) async fn pairs(
    c: Arc<dyn Contender>,
    name: String,
    until: Instant,
    tally: Tally,
) -> Result<Tally> {
    pairs_on(c, Arc::from([name]), until, tally).await
}

/// Acquire + release pairs on each of `names` in turn, timing each pair.
pub(super) async fn pairs_on(
    c: Arc<dyn Contender>,
    names: Arc<[String]>,
    until: Instant,
    mut tally: Tally,
) -> Result<Tally> {
    for name in names.iter().cycle() {
        if Instant::now() >= until {
            break;
        }
        let start = Instant::now();
        let Some(held) = c.acquire(name, until).await? else {
            break;
        };
        tally.acquire_latencies.record(start.elapsed());
        held.release().await?;
        tally.latencies.record(start.elapsed());
        tally.acquisitions += 1;
    }
    Ok(tally)
}

/// Waits for the lock, holds it for `hold`, releases it; times each wait.
pub(super) async fn waits(
    c: Arc<dyn Contender>,
    name: String,
    until: Instant,
    hold: Duration,
    mut tally: Tally,
) -> Result<Tally> {
    while Instant::now() < until {
        let start = Instant::now();
        let Some(held) = c.acquire(&name, until).await? else {
            break;
        };
        tally.latencies.record(start.elapsed());
        tally.acquisitions += 1;
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        held.release().await?;
    }
    Ok(tally)
}

/// Waits for a permit of `name`, releases it at once; times each wait.
pub(super) async fn permit_waits(
    c: Arc<dyn Contender>,
    name: String,
    permits: u32,
    until: Instant,
    mut tally: Tally,
) -> Result<Tally> {
    while Instant::now() < until {
        let start = Instant::now();
        let Some(held) = c.acquire_permit(&name, permits, until).await? else {
            break;
        };
        tally.latencies.record(start.elapsed());
        tally.acquisitions += 1;
        held.release().await?;
    }
    Ok(tally)
}

/// Waits for one side of the read-write lock `name` (the write side when
/// `write`), releases it at once; times each wait, a writer's apart.
/// `client` tells the floor which of its names is this client's.
pub(super) async fn side_waits(
    c: Arc<dyn Contender>,
    name: String,
    client: usize,
    write: bool,
    until: Instant,
    mut tally: Tally,
) -> Result<Tally> {
    while Instant::now() < until {
        let start = Instant::now();
        let Some(held) = c.acquire_side(&name, client, write, until).await? else {
            break;
        };
        let waited = start.elapsed();
        tally.acquisitions += 1;
        if write {
            tally.writes += 1;
            tally.write_latencies.record(waited);
        } else {
            tally.latencies.record(waited);
        }
        held.release().await?;
    }
    Ok(tally)
}

/// What a hand-off passes on: a lock, or the lead of an election (the
/// grant is then a leadership, and its release a resignation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Baton {
    Lock,
    Lead,
}

/// What the hand-off clients share: who released last and when, on this
/// process's monotonic clock, and a count of grants.
#[derive(Default)]
pub(super) struct Relay {
    baton: Mutex<Option<(usize, Instant)>>,
    grants: watch::Sender<u64>,
}

/// Holds, releases, and sits out until another client holds the lock (or
/// leads the election, resigns, and sits out until another client leads), so
/// every release is a hand-off to a client that was already waiting, never
/// a re-grab by the releaser. The latency is from the moment the releaser
/// calls release to the moment the next holder's acquire returns: the lock
/// becomes free somewhere inside the release call, so starting the clock at
/// its return could make a hand-off look shorter than it was.
pub(super) async fn hand_offs(
    c: Arc<dyn Contender>,
    name: String,
    until: Instant,
    relay: Arc<Relay>,
    me: usize,
    baton: Baton,
    mut tally: Tally,
) -> Result<Tally> {
    let mut grants = relay.grants.subscribe();
    while Instant::now() < until {
        let granted = match baton {
            Baton::Lock => c.acquire(&name, until).await?,
            Baton::Lead => c.campaign(&name, until).await?,
        };
        let Some(held) = granted else {
            break;
        };
        let held_at = Instant::now();
        let passed = relay.baton.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((_, released_at)) = passed.filter(|(from, _)| *from != me) {
            tally.latencies.record(held_at - released_at);
        }
        let mut mine = 0;
        relay.grants.send_modify(|n| {
            *n += 1;
            mine = *n;
        });
        tally.acquisitions += 1;
        tokio::time::sleep(HOLD).await;
        *relay.baton.lock().unwrap_or_else(|p| p.into_inner()) = Some((me, Instant::now()));
        held.release().await?;
        let next_holder = grants.wait_for(|n| *n > mine);
        // Out of time or nobody left waiting: the loop ends either way.
        let _ = tokio::time::timeout_at(until.into(), next_holder).await;
    }
    Ok(tally)
}
