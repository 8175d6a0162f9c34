//! The cancellation storm: many tasks on a few names, with acquires and
//! releases cut at random instants, guards dropped without release, and
//! guards held past their first renewal.
//!
//! A pooled connection, a retry path or a background task that is correct
//! only when nothing is cancelled shows up here as two holders at once, a
//! token that goes backwards, or a lock nobody can take any more.

use crate::cut::maybe_cut_after;
use crate::kinds::Kinds;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{
    AcquireOptions, Error, Fencing, LockGuard, LockHandle, LockKind, LockState, Locker, Wait,
};
use rand::Rng;
use tokio::time::{Instant, sleep};

use crate::{Target, Verdict};

/// Independent clients (connections), as separate processes would have.
const CLIENTS: usize = 4;
/// Tasks sharing each client.
const TASKS_PER_CLIENT: usize = 6;
/// Names the tasks fight over.
const NAMES: usize = 3;
/// How long the storm lasts at least; never less than two TTLs, since a
/// name whose release was cut stays taken until its TTL runs out (memcache's
/// shortest is 4 s), and the storm must go on long after that.
const STORM: Duration = Duration::from_secs(3);
/// The permits of the semaphores in a storm of permits.
const PERMITS: u32 = 2;

/// What the storm's tasks ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storm {
    /// The lock.
    Locks,
    /// Permits of semaphores of [`PERMITS`].
    Permits,
    /// Reads and writes (one in three) of read-write locks.
    ReadsAndWrites,
}

impl Storm {
    /// What one acquire of this storm asks for.
    fn pick(self, rng: &mut impl Rng) -> LockKind {
        match self {
            Storm::Locks => LockKind::Exclusive,
            Storm::Permits => LockKind::permit(PERMITS),
            Storm::ReadsAndWrites if rng.random_range(0..3) == 0 => LockKind::Write,
            Storm::ReadsAndWrites => LockKind::Read,
        }
    }

    /// What the check after the storm asks for: the exclusive side of a
    /// read-write lock, which no reader, writer or waiting writer left
    /// behind may keep out for long.
    fn last(self) -> LockKind {
        match self {
            Storm::ReadsAndWrites => LockKind::Write,
            other => other.pick(&mut rand::rng()),
        }
    }
}

/// Whether a new grant of `kind` may stand beside `held` of one name.
fn compatible(kind: LockKind, held: &[LockKind]) -> bool {
    match kind {
        LockKind::Permit { permits } => held.len() < permits as usize,
        LockKind::Read => held.iter().all(|k| *k == LockKind::Read),
        _ => held.is_empty(),
    }
}

/// What every task sees: the guards believed held, and what went wrong.
#[derive(Default)]
struct Record {
    /// Guards handed out and not yet released or dropped, by an id.
    live: HashMap<u64, LockHandle>,
    next_id: u64,
    /// The greatest token granted so far, per name.
    greatest: HashMap<String, u64>,
    /// Every token granted, per name (holders of one semaphore or one read
    /// side may be granted in either order, but never the same token).
    tokens: HashMap<String, Vec<u64>>,
    grants: usize,
    late_grants: usize,
    errors: HashMap<&'static str, usize>,
    problems: Vec<String>,
}

impl Record {
    /// Checks a new grant against every guard still believed held, and
    /// keeps it. `None` if the grant arrived already lost (its reply came
    /// after its lease ran out), which is not a grant anyone may act on.
    fn grant(&mut self, guard: &LockGuard, fencing: Fencing) -> Option<u64> {
        let handle = guard.handle();
        // One instant for every check: a grant whose own lease has run out
        // by now (its reply came late, or this task was preempted) is no
        // grant, and is left out of the order of grants.
        let now = Instant::now();
        if handle.state() == LockState::Lost || handle.lease().deadline() <= now {
            self.late_grants += 1;
            return None;
        }
        let name = guard.name().as_str().to_owned();
        // The others that believe they hold it: not lost, their own lease
        // not run out.
        let believers: Vec<&LockHandle> = self
            .live
            .values()
            .filter(|h| h.name().as_str() == name)
            .filter(|h| h.state() != LockState::Lost && h.lease().deadline() > now)
            .collect();
        let kinds: Vec<LockKind> = believers.iter().map(|h| h.kind()).collect();
        if !compatible(guard.kind(), &kinds) {
            self.problems.push(format!(
                "{name}: token {} ({}) granted while {:?} were still held",
                guard.token(),
                guard.kind(),
                believers
                    .iter()
                    .map(|h| (
                        h.token().get(),
                        h.kind().to_string(),
                        h.lease().deadline() - now
                    ))
                    .collect::<Vec<_>>()
            ));
        }
        let token = guard.token().get();
        self.tokens.entry(name.clone()).or_default().push(token);
        let greatest = self.greatest.entry(name.clone()).or_default();
        // Grants that may overlap may also come back out of order.
        if fencing == Fencing::Strict && guard.kind().is_exclusive() && token <= *greatest {
            self.problems.push(format!(
                "{name}: token {token} granted after token {greatest}"
            ));
        }
        *greatest = (*greatest).max(token);
        self.grants += 1;
        let id = self.next_id;
        self.next_id += 1;
        self.live.insert(id, handle);
        Some(id)
    }

    fn error(&mut self, e: &Error) {
        let kind = match e {
            Error::Busy { .. } | Error::WaitTimeout { .. } => return,
            Error::Timeout { .. } => "timeout",
            Error::Unavailable { .. } => "unavailable",
            Error::NotHeld { .. } => "not held",
            Error::Lost { .. } => "lost",
            Error::Backend { .. } => {
                // A reply the client did not expect: its protocol is out of
                // step (a cut request left a reply behind, say).
                self.problems.push(e.to_string());
                "backend"
            }
            _ => {
                self.problems.push(format!("unexpected error: {e}"));
                "other"
            }
        };
        *self.errors.entry(kind).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Record>>;

fn record(shared: &Shared) -> std::sync::MutexGuard<'_, Record> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// A cut after a random instant, or none: each await is cut about one time
/// in three, at a point finer than tokio's timer (whose millisecond ticks
/// would let most round trips on loopback finish first).
fn cut() -> Option<Duration> {
    let mut rng = rand::rng();
    match rng.random_range(0..6) {
        0 => Some(Duration::ZERO),
        1 => Some(Duration::from_micros(rng.random_range(0..3_000))),
        _ => None,
    }
}

/// One task's loop until the storm ends.
async fn worker(
    locker: Locker,
    storm: Storm,
    names: Arc<Vec<String>>,
    ttl: Duration,
    length: Duration,
    shared: Shared,
) {
    let fencing = locker.capabilities().fencing;
    let end = Instant::now() + length;
    while Instant::now() < end {
        let (name, kind, wait, hold, ending) = {
            let mut rng = rand::rng();
            let kind = storm.pick(&mut rng);
            let name = names[rng.random_range(0..names.len())].clone();
            let wait = match rng.random_range(0..3) {
                0 => Wait::No,
                _ => Wait::For(Duration::from_millis(rng.random_range(1..300))),
            };
            // One hold in eight lasts past the first renewal (a third of
            // the TTL), and one in eight ends right around it, so that a
            // release often meets a renewal in flight.
            let renewal = ttl / 3;
            let hold = match rng.random_range(0..8) {
                0 => ttl / 2,
                1 => {
                    renewal - Duration::from_millis(3)
                        + Duration::from_micros(rng.random_range(0..6_000))
                }
                _ => Duration::from_micros(rng.random_range(0..5_000)),
            };
            (name, kind, wait, hold, rng.random_range(0..6))
        };
        let opts = AcquireOptions::with_ttl(ttl).wait(wait);
        let guard = match maybe_cut_after(cut(), locker.lock_kind(&name, kind, opts)).await {
            None => continue,
            Some(Err(e)) => {
                record(&shared).error(&e);
                continue;
            }
            Some(Ok(guard)) => guard,
        };
        let id = record(&shared).grant(&guard, fencing);
        sleep(hold).await;
        if let Some(id) = id {
            record(&shared).live.remove(&id);
        }
        match ending {
            // Dropped: released in the background.
            0 => drop(guard),
            _ => {
                if let Some(Err(e)) = maybe_cut_after(cut(), guard.release()).await {
                    record(&shared).error(&e);
                }
            }
        }
    }
}

/// Dozens of tasks on a few names, with every await cut at random: no two
/// guards believe they hold one name at once, tokens strictly increase on
/// `Strict` backends, no reply goes to the wrong request, and every name
/// can be taken again afterwards (within a TTL).
pub async fn cancelled_at_random(t: &dyn Target) -> Verdict {
    storm(t, Storm::Locks).await
}

/// [`cancelled_at_random`] on semaphores of two permits: never more than
/// two guards believe they hold a permit of one name; tokens are never
/// granted twice; every permit comes back.
pub async fn cancelled_at_random_permits(t: &dyn Target) -> Verdict {
    storm(t, Storm::Permits).await
}

/// [`cancelled_at_random`] on read-write locks, one acquire in three a
/// write: a writer never believes it holds beside anybody, a reader never
/// beside a writer; afterwards a writer gets in, so no cut attempt left a
/// reader, a writer or a waiting writer behind for longer than a TTL.
pub async fn cancelled_at_random_read_write(t: &dyn Target) -> Verdict {
    storm(t, Storm::ReadsAndWrites).await
}

async fn storm(t: &dyn Target, storm: Storm) -> Verdict {
    let probe = Locker::from_arc(t.client().await);
    let caps = probe.capabilities();
    let kind = storm.last();
    if !caps.supports(kind) {
        let e = probe
            .lock_kind("storm", kind, AcquireOptions::default())
            .await
            .expect_err("an unsupported kind");
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        return Verdict::NotApplicable(format!(
            "{} keeps no {} (checked: asking fails with Unsupported)",
            caps.backend,
            kind.family().operation()
        ));
    }
    let ttl = caps.min_ttl.max(Duration::from_secs(1));
    let length = STORM.max(ttl * 2);
    let tag: u32 = rand::rng().random();
    let names: Arc<Vec<String>> =
        Arc::new((0..NAMES).map(|i| format!("storm-{tag:08x}-{i}")).collect());
    let shared = Shared::default();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let locker = Locker::from_arc(t.client().await);
        for _ in 0..TASKS_PER_CLIENT {
            tasks.push(tokio::spawn(worker(
                locker.clone(),
                storm,
                names.clone(),
                ttl,
                length,
                shared.clone(),
            )));
        }
    }
    for task in tasks {
        task.await.expect("a storm task panicked");
    }
    // Nothing is left held for longer than a TTL: cut acquires and releases
    // were finished or undone, dropped guards released or expired.
    for name in names.iter() {
        let opts = AcquireOptions::with_ttl(ttl).wait(Wait::For(ttl * 3 + Duration::from_secs(10)));
        // Every permit comes back, not just one.
        let takes = match storm {
            Storm::Permits => PERMITS,
            _ => 1,
        };
        let mut guards = Vec::new();
        for _ in 0..takes {
            let guard = probe
                .lock_kind(name, kind, opts)
                .await
                .unwrap_or_else(|e| panic!("{name} could not be taken after the storm: {e}"));
            let greatest = record(&shared).greatest.get(name).copied().unwrap_or(0);
            if caps.fencing == Fencing::Strict {
                assert!(
                    guard.token().get() > greatest,
                    "{name}: token {} after the storm, {greatest} during it",
                    guard.token()
                );
            }
            guards.push(guard);
        }
        for guard in guards {
            guard.release().await.expect("release after the storm");
        }
    }
    let mut record = record(&shared);
    if caps.fencing == Fencing::Strict {
        for (name, tokens) in std::mem::take(&mut record.tokens) {
            let mut distinct = tokens.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if distinct.len() != tokens.len() {
                record
                    .problems
                    .push(format!("{name}: a token was granted twice"));
            }
        }
    }
    eprintln!(
        "{}: {} grants ({} arrived lost), errors {:?}",
        t.label(),
        record.grants,
        record.late_grants,
        record.errors
    );
    assert!(
        record.problems.is_empty(),
        "{}: {} problems in {} grants, the first ones: {:#?}",
        t.label(),
        record.problems.len(),
        record.grants,
        &record.problems[..record.problems.len().min(10)]
    );
    // A grant that arrived after its lease ran out (slow replies on a
    // loaded machine) was still made by the server: the storm ran.
    assert!(
        record.grants + record.late_grants >= NAMES * 5,
        "{}: only {} grants ({} of them arrived lost) in {length:?}: the storm did not run",
        t.label(),
        record.grants + record.late_grants,
        record.late_grants
    );
    Verdict::Passed
}
