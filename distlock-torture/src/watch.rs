//! What the nemeses ask of one lock's history — who holds, who is inside a
//! register call, when the lock was last granted and last healed — kept up
//! to date line by line as it grows instead of read whole at every look.

use std::collections::{HashMap, HashSet};

use lock_core::LockKind;

use crate::history::{Event, Follower};

/// The state of one history as far as it has been read.
#[derive(Debug)]
pub(crate) struct Watch {
    follower: Follower,
    /// Each process's last event, signals left out.
    last: HashMap<u32, Event>,
    last_grant_ns: Option<u64>,
    last_heal_ns: Option<u64>,
    /// The workers that have connected.
    ready: HashSet<u32>,
}

/// Where a worker is in its loop, by its last event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// In its hold: between its read of the register and its write (or
    /// release), or, for a grant that does not use the register (a
    /// permit), between its grant and its release.
    Holding,
    /// Not between announcing a register call and finishing it.
    OutsideTheRegister,
}

impl Watch {
    pub(crate) fn new(follower: Follower) -> Self {
        Self {
            follower,
            last: HashMap::new(),
            last_grant_ns: None,
            last_heal_ns: None,
            ready: HashSet::new(),
        }
    }

    fn catch_up(&mut self) {
        // A line that cannot be read now is read at the next look.
        let Ok(records) = self.follower.new_records() else {
            return;
        };
        for r in records {
            match r.event {
                Event::AtRisk | Event::Lost => continue,
                Event::Grant { .. } => self.last_grant_ns = self.last_grant_ns.max(Some(r.ns)),
                Event::Healed(_) => self.last_heal_ns = self.last_heal_ns.max(Some(r.ns)),
                Event::Ready => {
                    self.ready.insert(r.pid);
                }
                _ => {}
            }
            self.last.insert(r.pid, r.event);
        }
    }

    /// The workers (in pid order) whose last event puts them in `wanted`.
    pub(crate) fn in_phase(&mut self, workers: &[u32], wanted: Phase) -> Vec<u32> {
        self.catch_up();
        let mut found: Vec<u32> = workers
            .iter()
            .copied()
            .filter(|pid| phase_is(self.last.get(pid), wanted))
            .collect();
        found.sort_unstable();
        found
    }

    /// Whether every one of `workers` has connected.
    pub(crate) fn all_ready(&mut self, workers: &[u32]) -> bool {
        self.catch_up();
        workers.iter().all(|pid| self.ready.contains(pid))
    }

    /// Whether the lock was granted after the last fault ended (or no
    /// fault has ended yet).
    pub(crate) fn granted_since_heal(&mut self) -> bool {
        self.catch_up();
        match (self.last_heal_ns, self.last_grant_ns) {
            (None, _) => true,
            (Some(heal), grant) => grant.is_some_and(|g| g > heal),
        }
    }
}

fn phase_is(last: Option<&Event>, wanted: Phase) -> bool {
    // A permit's holder never calls the register; any other grant is
    // followed by a read, a write line by the write.
    let permit = |kind: &LockKind| matches!(kind, LockKind::Permit { .. });
    match (wanted, last) {
        (Phase::Holding, Some(Event::Read { .. })) => true,
        (Phase::Holding, Some(Event::Grant { kind, .. })) => permit(kind),
        (Phase::Holding, _) => false,
        (Phase::OutsideTheRegister, Some(Event::Grant { kind, .. })) => permit(kind),
        (Phase::OutsideTheRegister, Some(Event::Write { .. })) => false,
        (Phase::OutsideTheRegister, _) => true,
    }
}
