//! Reads a history and counts what happened to the lock and the fenced
//! register: the figures of one run.
//!
//! Time order between processes is real-time order on the shared clock,
//! and every interval is the one the *client* saw: a critical section runs
//! from the `grant` line (after the server granted) to the `release` line
//! (before the server released), so an overlap found here happened on the
//! server too.
//!
//! One history is one lock — a mutex, a semaphore or a read-write lock —
//! and each grant line says what it granted, so the rule of exclusion is
//! the grant's: a mutex holder or a writer excludes every other holder, a
//! reader excludes writers, a permit of `N` admits `N` holders.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use lock_core::LockKind;
use serde::{Deserialize, Serialize};

use crate::history::{Event, Record};

/// The figures of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Acquires that returned a lease.
    pub grants: u64,
    /// Grants made while their own lease and those of holders they must
    /// not hold beside were all valid: beside any other holder for a mutex
    /// or a writer, beside a writer for a reader, beside `N` others for a
    /// permit of `N`. A broken promise of exclusion.
    pub unsafe_overlaps: u64,
    /// Writes the register accepted although another holder, granted after
    /// this one, had already read it: a broken fence.
    pub stale_writes_accepted: u64,
    /// Writes the register refused: the fence doing its job.
    pub stale_writes_rejected: u64,
    /// Reads the register refused.
    pub stale_reads_rejected: u64,
    /// Grants whose token is not greater than that of a grant completed
    /// before this acquire started.
    pub token_order_violations: u64,
    /// Writes the register accepted.
    pub writes_accepted: u64,
    /// Accepted writes missing from the register's final value (each
    /// write stores the value it read plus one).
    pub lost_writes: u64,
    /// Permits the probe at the end of the run could not take, once every
    /// worker had stopped (of a semaphore's `N`; the mutex or the write
    /// side of a read-write lock counts 1): a crashed or paused holder's
    /// permit that never came back.
    #[serde(default)]
    pub leaked_permits: u64,
    /// The longest time from the end of a fault to the next grant, in
    /// milliseconds; `None` if a fault was never followed by a grant.
    pub recovery_ms: Option<u64>,
    /// Faults the nemesis applied.
    pub faults: u64,
    /// `at-risk` signals the guards raised.
    pub at_risk_signals: u64,
    /// `lost` signals the guards raised.
    pub lost_signals: u64,
    /// Failed acquires and releases, by `operation:kind`.
    pub errors: BTreeMap<String, u64>,
}

#[derive(Debug)]
struct Grant {
    invoke_ns: u64,
    grant_ns: u64,
    kind: LockKind,
    token: u64,
    deadline_ns: u64,
    end_ns: Option<u64>,
    read_ns: Option<u64>,
}

impl Grant {
    /// The end of the time in which this holder was promised exclusion.
    fn valid_until(&self) -> u64 {
        self.deadline_ns.min(self.end_ns.unwrap_or(u64::MAX))
    }

    /// Whether granting this beside the valid holders `others` breaks the
    /// rule of its kind.
    fn breaks_exclusion(&self, others: &[&Grant]) -> bool {
        match self.kind {
            LockKind::Permit { permits } => others.len() >= permits as usize,
            LockKind::Read => others.iter().any(|g| g.kind.is_exclusive()),
            _ => !others.is_empty(),
        }
    }
}

struct Write {
    ns: u64,
    grant: usize,
    accepted: Option<bool>,
}

/// Counts the figures of a history (in any order; it is sorted by time).
pub fn check(records: &[Record]) -> Figures {
    let mut records: Vec<&Record> = records.iter().collect();
    records.sort_by_key(|r| r.ns);
    let mut figures = Figures::default();
    let mut grants: Vec<Grant> = Vec::new();
    let mut writes: Vec<Write> = Vec::new();
    // Per process: the acquire in flight, the grants held (oldest first: a
    // worker holds one, the probe every permit), the last write.
    let mut invoked: HashMap<u32, u64> = HashMap::new();
    let mut holding: HashMap<u32, VecDeque<usize>> = HashMap::new();
    let mut writing: HashMap<u32, usize> = HashMap::new();
    let mut healed: Vec<u64> = Vec::new();
    let mut final_value = None;
    let error = |figures: &mut Figures, op: &str, kind: &str| {
        *figures.errors.entry(format!("{op}:{kind}")).or_default() += 1;
    };
    for r in records {
        match &r.event {
            Event::Ready => {}
            Event::Invoke => {
                invoked.insert(r.pid, r.ns);
            }
            Event::Grant {
                token,
                deadline_ns,
                kind,
            } => {
                holding.entry(r.pid).or_default().push_back(grants.len());
                grants.push(Grant {
                    invoke_ns: invoked.remove(&r.pid).unwrap_or(r.ns),
                    grant_ns: r.ns,
                    kind: *kind,
                    token: *token,
                    deadline_ns: *deadline_ns,
                    end_ns: None,
                    read_ns: None,
                });
            }
            Event::Fail(kind) => {
                invoked.remove(&r.pid);
                error(&mut figures, "acquire", kind);
            }
            Event::Read { .. } => {
                if let Some(&g) = holding.get(&r.pid).and_then(VecDeque::back) {
                    grants[g].read_ns = Some(r.ns);
                }
            }
            Event::ReadRejected(_) => figures.stale_reads_rejected += 1,
            Event::Write { .. } => {
                if let Some(&g) = holding.get(&r.pid).and_then(VecDeque::back) {
                    writing.insert(r.pid, writes.len());
                    writes.push(Write {
                        ns: r.ns,
                        grant: g,
                        accepted: None,
                    });
                }
            }
            Event::Accepted | Event::Rejected => {
                if let Some(w) = writing.remove(&r.pid) {
                    writes[w].accepted = Some(r.event == Event::Accepted);
                }
            }
            Event::Release { deadline_ns } => {
                if let Some(g) = holding.get_mut(&r.pid).and_then(VecDeque::pop_front) {
                    grants[g].end_ns = Some(r.ns);
                    // Renewals may have moved the deadline on.
                    grants[g].deadline_ns = grants[g].deadline_ns.max(*deadline_ns);
                }
            }
            Event::Released => {}
            Event::ReleaseFailed(kind) => error(&mut figures, "release", kind),
            Event::AtRisk => figures.at_risk_signals += 1,
            Event::Lost => figures.lost_signals += 1,
            Event::Fault(_) => figures.faults += 1,
            Event::Healed(_) => healed.push(r.ns),
            Event::Probe { got, wanted } => {
                figures.leaked_permits += u64::from(wanted.saturating_sub(*got));
            }
            Event::Final(value) => final_value = Some(*value),
        }
    }
    figures.grants = grants.len() as u64;
    figures.unsafe_overlaps = unsafe_overlaps(&grants);
    figures.token_order_violations = token_order_violations(&grants);
    figures.stale_writes_accepted = stale_writes_accepted(&grants, &writes);
    figures.stale_writes_rejected =
        writes.iter().filter(|w| w.accepted == Some(false)).count() as u64;
    figures.writes_accepted = writes.iter().filter(|w| w.accepted == Some(true)).count() as u64;
    figures.lost_writes = final_value.map_or(0, |v| figures.writes_accepted.saturating_sub(v));
    figures.recovery_ms = recovery(&grants, &healed);
    figures
}

/// Grants (in grant order) made, with time left on their own lease, while
/// the earlier grants still within their promised time break their rule.
/// The holders only grow in number at a grant, so looking at each grant
/// sees every instant with too many.
fn unsafe_overlaps(grants: &[Grant]) -> u64 {
    let mut order: Vec<&Grant> = grants.iter().collect();
    order.sort_by_key(|g| g.grant_ns);
    let mut valid: Vec<&Grant> = Vec::new();
    let mut overlaps = 0;
    for g in order {
        valid.retain(|h| h.valid_until() > g.grant_ns);
        if g.grant_ns < g.valid_until() && g.breaks_exclusion(&valid) {
            overlaps += 1;
        }
        valid.push(g);
    }
    overlaps
}

/// Grants whose token is not above every token granted before their
/// acquire started.
fn token_order_violations(grants: &[Grant]) -> u64 {
    let mut by_grant: Vec<&Grant> = grants.iter().collect();
    by_grant.sort_by_key(|g| g.grant_ns);
    let mut by_invoke: Vec<&Grant> = grants.iter().collect();
    by_invoke.sort_by_key(|g| g.invoke_ns);
    let (mut next, mut highest, mut violations) = (0, None, 0);
    for g in by_invoke {
        while next < by_grant.len() && by_grant[next].grant_ns < g.invoke_ns {
            highest = highest.max(Some(by_grant[next].token));
            next += 1;
        }
        if highest.is_some_and(|h| g.token <= h) {
            violations += 1;
        }
    }
    violations
}

/// Accepted writes made after a holder granted later had read the
/// register.
fn stale_writes_accepted(grants: &[Grant], writes: &[Write]) -> u64 {
    let mut by_invoke: Vec<&Grant> = grants.iter().collect();
    by_invoke.sort_by_key(|g| g.invoke_ns);
    // earliest_read[k]: the earliest read among grants by_invoke[k..].
    let mut earliest_read = vec![u64::MAX; by_invoke.len() + 1];
    for k in (0..by_invoke.len()).rev() {
        earliest_read[k] = earliest_read[k + 1].min(by_invoke[k].read_ns.unwrap_or(u64::MAX));
    }
    writes
        .iter()
        .filter(|w| w.accepted == Some(true))
        .filter(|w| {
            let granted = grants[w.grant].grant_ns;
            let later = by_invoke.partition_point(|g| g.invoke_ns <= granted);
            earliest_read[later] < w.ns
        })
        .count() as u64
}

/// The longest wait from the end of a fault to the next grant.
fn recovery(grants: &[Grant], healed: &[u64]) -> Option<u64> {
    let mut starts: Vec<u64> = grants.iter().map(|g| g.grant_ns).collect();
    starts.sort_unstable();
    let mut longest = Some(0);
    for &h in healed {
        let next = starts.get(starts.partition_point(|&s| s <= h)).copied();
        longest = match (longest, next) {
            (Some(l), Some(n)) => Some(l.max(n - h)),
            _ => None,
        };
    }
    longest.map(|ns| Duration::from_nanos(ns).as_millis() as u64)
}

#[cfg(test)]
mod tests;
