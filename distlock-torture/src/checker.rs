//! Reads a history and counts what happened to the lock and the fenced
//! register: the figures of one run.
//!
//! Time order between processes is real-time order on the shared clock,
//! and every interval is the one the *client* saw: a critical section runs
//! from the `grant` line (after the server granted) to the `release` line
//! (before the server released), so an overlap found here happened on the
//! server too.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::history::{Event, Record};

/// The figures of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Acquires that returned a lease.
    pub grants: u64,
    /// Grants whose critical section overlapped an earlier one while both
    /// holders' own lease deadlines were still ahead: a broken promise of
    /// mutual exclusion.
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
    // Per process: the acquire in flight, the grant held, the last write.
    let mut invoked: HashMap<u32, u64> = HashMap::new();
    let mut holding: HashMap<u32, usize> = HashMap::new();
    let mut writing: HashMap<u32, usize> = HashMap::new();
    let mut healed: Vec<u64> = Vec::new();
    let mut final_value = None;
    let error = |figures: &mut Figures, op: &str, kind: &str| {
        *figures.errors.entry(format!("{op}:{kind}")).or_default() += 1;
    };
    for r in records {
        match &r.event {
            Event::Invoke => {
                invoked.insert(r.pid, r.ns);
            }
            Event::Grant { token, deadline_ns } => {
                holding.insert(r.pid, grants.len());
                grants.push(Grant {
                    invoke_ns: invoked.remove(&r.pid).unwrap_or(r.ns),
                    grant_ns: r.ns,
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
                if let Some(&g) = holding.get(&r.pid) {
                    grants[g].read_ns = Some(r.ns);
                }
            }
            Event::ReadRejected(_) => figures.stale_reads_rejected += 1,
            Event::Write { .. } => {
                if let Some(&g) = holding.get(&r.pid) {
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
                if let Some(g) = holding.remove(&r.pid) {
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

/// Grants (in grant order) starting before an earlier grant's promised
/// time ran out.
fn unsafe_overlaps(grants: &[Grant]) -> u64 {
    let mut order: Vec<&Grant> = grants.iter().collect();
    order.sort_by_key(|g| g.grant_ns);
    let mut promised_until = 0;
    let mut overlaps = 0;
    for g in order {
        if g.grant_ns < promised_until && g.grant_ns < g.valid_until() {
            overlaps += 1;
        }
        promised_until = promised_until.max(g.valid_until());
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
mod tests {
    use super::*;

    fn history(text: &str) -> Vec<Record> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| l.parse().unwrap())
            .collect()
    }

    const MS: u64 = 1_000_000;

    /// A history with one of each broken promise planted in it is reported
    /// as exactly that.
    #[test]
    fn a_planted_history_is_reported_exactly() {
        let text = format!(
            "
            0 1 invoke
            {g1} 1 grant 10 {far}
            {r1} 1 read 10 0
            30 1 write 10 1
            31 1 accepted
            40 1 release 0
            41 1 released
            50 2 invoke
            60 2 grant 11 500
            65 3 invoke
            70 2 read 11 1
            80 3 grant 12 600
            90 3 read 12 1
            100 3 write 12 2
            101 3 accepted
            110 3 release 0
            120 2 write 11 2
            121 2 accepted
            130 2 release 0
            131 2 release-failed not-held
            {f} 0 fault pause-holder
            {h} 0 healed pause-holder
            {i4} 4 invoke
            {g4} 4 grant 5 {far}
            {r4} 4 read-rejected 5
            {e4} 4 release 0
            {x} 5 invoke
            {x1} 5 fail timeout
            {x2} 0 final 2
            ",
            g1 = 10,
            r1 = 20,
            far = 1000,
            f = 140,
            h = 190,
            i4 = 200,
            g4 = 190 + 3 * MS,
            r4 = 190 + 3 * MS + 1,
            e4 = 190 + 3 * MS + 2,
            x = 190 + 4 * MS,
            x1 = 190 + 5 * MS,
            x2 = 190 + 6 * MS,
        );
        let figures = check(&history(&text));
        let expected = Figures {
            grants: 4,
            // Holder 3 granted while holder 2's lease (to 500) was valid.
            unsafe_overlaps: 1,
            // Holder 2 wrote after holder 3, granted later, had read.
            stale_writes_accepted: 1,
            stale_writes_rejected: 0,
            stale_reads_rejected: 1,
            // Holder 4 got token 5 after token 12 was granted.
            token_order_violations: 1,
            writes_accepted: 3,
            // Holders 2 and 3 both stored 2.
            lost_writes: 1,
            recovery_ms: Some(3),
            faults: 1,
            at_risk_signals: 0,
            lost_signals: 0,
            errors: [("acquire:timeout", 1), ("release:not-held", 1)]
                .map(|(k, v)| (k.to_owned(), v))
                .into(),
        };
        assert_eq!(figures, expected);
    }

    /// The same three holders one after another, with a stale holder the
    /// fence stops, break no promise.
    #[test]
    fn a_clean_history_with_a_fenced_stale_holder_breaks_nothing() {
        let figures = check(&history(
            "
            0 1 invoke
            10 1 grant 1 50
            20 1 read 1 0
            60 2 invoke
            70 2 grant 2 500
            80 2 read 2 0
            90 2 write 2 1
            91 2 accepted
            100 2 release 0
            110 1 write 1 1
            111 1 rejected
            112 1 lost
            120 1 release 0
            121 1 release-failed lost
            130 0 final 1
            ",
        ));
        assert_eq!(figures.grants, 2);
        assert_eq!(figures.unsafe_overlaps, 0, "holder 1's lease ended at 50");
        assert_eq!(figures.stale_writes_accepted, 0);
        assert_eq!(figures.stale_writes_rejected, 1);
        assert_eq!(figures.token_order_violations, 0);
        assert_eq!(figures.lost_writes, 0);
        assert_eq!(figures.lost_signals, 1);
    }

    #[test]
    fn a_killed_holder_is_promised_its_lease_to_the_end() {
        let figures = check(&history(
            "
            0 1 invoke
            10 1 grant 1 100
            20 2 invoke
            50 2 grant 2 900
            60 3 invoke
            150 3 grant 3 900
            ",
        ));
        // Holder 1 never released: 2 overlapped it, 3 came after its lease.
        // Holder 2 never released either, so 3 overlapped 2.
        assert_eq!(figures.unsafe_overlaps, 2);
    }

    #[test]
    fn a_fault_never_followed_by_a_grant_has_no_recovery() {
        let figures = check(&history("0 0 fault x\n10 0 healed x\n"));
        assert_eq!(figures.recovery_ms, None);
    }
}
