//! Hand-over between the read-write lock acquirers of one backend: a
//! dialect leaves a group and admits waiters in one transaction
//! (PostgreSQL's leaving function; elsewhere `admission/leave.rs`).
//!
//! The backend keeps, per lock name, what each of its acquirers is doing:
//! waiting (refused), handed a grant by a release, holding, or releasing. A
//! release names the waiters of this backend to its transaction, which
//! deletes the releaser's row and then runs the admission for each waiter
//! in turn, inside the same transaction and under the group's row lock, so
//! the server's rule decides as it does for the waiter's own attempt. The
//! waiters admitted are handed their token and woken, and hold without a
//! statement of their own: a change of side costs the release's
//! transaction alone.
//!
//! What is known here is also used to skip attempts that would be refused:
//! a reader while a writer of this backend waits or holds, a writer while
//! anyone of this backend holds. Such a waiter is marked waiting, as a
//! refused one is, and the release of what blocks it names it. The server
//! decides every grant; what is skipped here only costs a wait, and every
//! way a blocker of this backend goes (a release, a give-up, a lease that
//! ran out, a release its caller stopped polling) wakes the waiters or
//! lets their next poll attempt for real: every entry has an end.
//!
//! A waiter whose own attempt failed is unsure (the statement may still be
//! applied, and the task that finishes it frees what it took): it is named
//! to no release, and a grant a release made for it is neither handed nor
//! let go here; its next attempt of its own finds it, or makes a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lock_core::backend::AcquireRequest;
use tokio::time::Instant;

/// A side of a read-write lock, as the holders table's `kind` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

impl Side {
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Refused (or skipped) until `until`, as the server's waiting mark
    /// lasts; a release may admit it with this TTL.
    Waiting {
        ttl_ms: i64,
        until: Instant,
    },
    /// Named to a release under way, which answers it by `answer_by`, or
    /// it waits as before.
    Offered {
        ttl_ms: i64,
        until: Instant,
        answer_by: Instant,
    },
    /// Its own attempt failed, and may yet be applied.
    Unsure,
    /// Admitted by a release whose statement was sent at `sent`.
    Handed {
        token: i64,
        sent: Instant,
        until: Instant,
    },
    Holding {
        token: i64,
        until: Instant,
    },
    /// Its release is under way.
    Releasing {
        token: i64,
        until: Instant,
    },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    side: Side,
    state: State,
}

impl Entry {
    fn waiting(side: Side, ttl: Duration, now: Instant) -> Self {
        // As long as the server's mark of a waiting writer lasts.
        let until = now + ttl.max(AcquireRequest::WRITER_MARK);
        let ttl_ms = crate::client::ttl_ms(ttl);
        Self {
            side,
            state: State::Waiting { ttl_ms, until },
        }
    }

    /// Whether this entry keeps `side` out, as far as this backend knows.
    fn blocks(&self, side: Side) -> bool {
        match self.state {
            State::Waiting { .. } | State::Offered { .. } => {
                side == Side::Read && self.side == Side::Write
            }
            State::Unsure => false,
            State::Handed { .. } | State::Holding { .. } | State::Releasing { .. } => {
                side == Side::Write || self.side == Side::Write
            }
        }
    }

    /// Whether it has come to its end: a lease that ran out (its guard
    /// forgotten, its release parked), a wait nobody renewed.
    fn ended(&self, now: Instant) -> bool {
        match self.state {
            State::Waiting { until, .. }
            | State::Offered { until, .. }
            | State::Handed { until, .. }
            | State::Holding { until, .. }
            | State::Releasing { until, .. } => until <= now,
            State::Unsure => false,
        }
    }

    /// Whether it holds the token `token` (a waiter's own grant, which an
    /// admission keeps rather than makes anew).
    fn holds_token(&self, token: i64) -> bool {
        matches!(self.state,
            State::Handed { token: t, .. } | State::Holding { token: t, .. } | State::Releasing { token: t, .. }
                if t == token)
    }

    /// Back to waiting, if a release named it.
    fn unoffer(&mut self) {
        if let State::Offered { ttl_ms, until, .. } = self.state {
            self.state = State::Waiting { ttl_ms, until };
        }
    }
}

/// What an acquirer does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Holds the grant a release made, with this token, sent then.
    Handed(i64, Instant),
    /// Waits: an acquirer of this backend keeps it out, or a release
    /// under way answers it.
    Wait,
    /// Attempts by itself.
    Attempt,
}

/// A release under way and the waiters it names to its statement, owned by
/// the task that runs the statement to its end, whether or not the
/// release's caller still waits. Dropped without [`settle`](Self::settle)
/// (the statement failed), it forgets the releaser and puts the waiters it
/// named back to waiting, and their next look (a wake-up, or their poll)
/// is an attempt of their own.
#[derive(Debug)]
#[must_use = "dropping the offer sends the waiters it names to look for themselves"]
pub(crate) struct Offer {
    turns: Arc<Turns>,
    name: String,
    owner: String,
    /// A writer alone, or readers; empty for none.
    pub(crate) waiters: Vec<Named>,
    settled: bool,
}

/// A waiter a release names: it asks for `side`, with a lease of `ttl_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) owner: String,
    pub(crate) side: Side,
    pub(crate) ttl_ms: i64,
}

/// What a release leaves to do once its statement answered.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Grants made for acquirers no longer waiting: each to be left.
    pub(crate) orphans: Vec<(String, i64)>,
    /// Whether local waiters should look again.
    pub(crate) wake: bool,
}

type Entries = HashMap<String, Entry>;

/// The most readers one release names: its statement binds a few
/// parameters per waiter, and the dialects cap a statement's parameters
/// (SQLite at 32,766). Readers left out are woken, and attempt.
const NAMED_AT_MOST: usize = 256;

/// The read-write acquirers of one backend, by lock name and owner.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    names: Mutex<HashMap<String, Entries>>,
}

impl Turns {
    fn names(&self) -> MutexGuard<'_, HashMap<String, Entries>> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What `owner`, asking for `side` with a lease of `ttl`, does next:
    /// hold the grant a release handed it (then it holds, for `ttl` from
    /// the release's send), wait, or attempt. One look, so a grant handed
    /// meanwhile is never lost to a mark of waiting.
    pub(crate) fn turn(&self, name: &str, owner: &str, side: Side, ttl: Duration) -> Turn {
        let mut names = self.names();
        let Some(entries) = names.get_mut(name) else {
            return Turn::Attempt;
        };
        let now = Instant::now();
        entries.retain(|o, e| o == owner || !e.ended(now));
        if let Some(entry) = entries.get_mut(owner) {
            match entry.state {
                State::Handed { token, sent, until } => {
                    entry.state = State::Holding { token, until };
                    return Turn::Handed(token, sent);
                }
                State::Offered { answer_by, .. } if answer_by > now => return Turn::Wait,
                _ => {}
            }
        }
        if entries.iter().any(|(o, e)| o != owner && e.blocks(side)) {
            entries.insert(owner.to_owned(), Entry::waiting(side, ttl, now));
            Turn::Wait
        } else {
            Turn::Attempt
        }
    }

    /// The outcome of `owner`'s own attempt, sent at `sent`: holding
    /// `token`, refused (waiting, unless a release handed it a grant or
    /// answers it meanwhile), or failed (`None`: unsure).
    pub(crate) fn attempted(
        &self,
        name: &str,
        owner: &str,
        side: Side,
        ttl: Duration,
        sent: Instant,
        outcome: Option<Option<i64>>,
    ) {
        let mut names = self.names();
        let entries = names.entry(name.to_owned()).or_default();
        let state = match outcome {
            Some(Some(token)) => State::Holding {
                token,
                until: sent + ttl,
            },
            Some(None) => {
                let now = Instant::now();
                match entries.get(owner).map(|e| e.state) {
                    Some(State::Handed { .. }) => return,
                    Some(State::Offered { answer_by, .. }) if answer_by > now => return,
                    _ => Entry::waiting(side, ttl, now).state,
                }
            }
            None => State::Unsure,
        };
        entries.insert(owner.to_owned(), Entry { side, state });
    }

    /// `owner`'s lease renewed until `until`.
    pub(crate) fn renewed(&self, name: &str, owner: &str, until: Instant) {
        if let Some(entry) = self.names().get_mut(name).and_then(|e| e.get_mut(owner))
            && let State::Holding { until: held, .. } = &mut entry.state
        {
            *held = until;
        }
    }

    /// The waiters the release of `owner`'s grant `token` (whose lease
    /// ends at `lease_end`) names to its statement, which answers within
    /// `within`: none while another acquirer of this backend holds (nobody
    /// waiting could be admitted); else the first writer waiting, or, with
    /// none, every reader waiting. Marks `owner` releasing.
    pub(crate) fn offer(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        side: Side,
        token: i64,
        lease_end: Instant,
        within: Duration,
    ) -> Offer {
        let mut names = self.names();
        let entries = names.entry(name.to_owned()).or_default();
        let now = Instant::now();
        entries.retain(|o, e| o == owner || !e.ended(now));
        let releasing = State::Releasing {
            token,
            until: lease_end,
        };
        entries.insert(
            owner.to_owned(),
            Entry {
                side,
                state: releasing,
            },
        );
        let others_hold = entries.iter().any(|(o, e)| {
            o != owner && matches!(e.state, State::Handed { .. } | State::Holding { .. })
        });
        let waiting = |side| {
            entries
                .iter()
                .filter(move |(_, e)| e.side == side && matches!(e.state, State::Waiting { .. }))
                .map(|(o, _)| o.clone())
        };
        // A writer admitted keeps every reader after it out, and only one
        // can be: one writer is named, and readers only when none waits.
        let named: Vec<String> = match (others_hold, waiting(Side::Write).next()) {
            (true, _) => Vec::new(),
            (false, Some(writer)) => vec![writer],
            (false, None) => waiting(Side::Read).take(NAMED_AT_MOST).collect(),
        };
        let answer_by = now + within;
        let mut waiters = Vec::with_capacity(named.len());
        for waiter in named {
            if let Some(entry) = entries.get_mut(&waiter)
                && let State::Waiting { ttl_ms, until } = entry.state
            {
                entry.state = State::Offered {
                    ttl_ms,
                    until,
                    answer_by,
                };
                waiters.push(Named {
                    side: entry.side,
                    owner: waiter,
                    ttl_ms,
                });
            }
        }
        Offer {
            turns: Arc::clone(self),
            name: name.to_owned(),
            owner: owner.to_owned(),
            waiters,
            settled: false,
        }
    }

    /// Forgets `owner`, whose release failed, and puts the waiters named
    /// to it back to waiting.
    fn release_failed(&self, name: &str, owner: &str, named: &[Named]) {
        let mut names = self.names();
        let Some(entries) = names.get_mut(name) else {
            return;
        };
        entries.remove(owner);
        for waiter in named {
            if let Some(entry) = entries.get_mut(&waiter.owner) {
                entry.unoffer();
            }
        }
        if entries.is_empty() {
            names.remove(name);
        }
    }

    /// `owner`'s acquire ended without a grant: forgets it, with the grant a
    /// release handed it meanwhile (to be left), and whether local waiters
    /// should look again (it was a writer keeping readers back).
    pub(crate) fn gave_up(&self, name: &str, owner: &str) -> (Option<i64>, bool) {
        let mut names = self.names();
        let Some(entries) = names.get_mut(name) else {
            return (None, false);
        };
        let gone = entries.remove(owner);
        if entries.is_empty() {
            names.remove(name);
        }
        match gone {
            Some(Entry {
                state: State::Handed { token, .. },
                ..
            }) => (Some(token), true),
            Some(Entry {
                side: Side::Write, ..
            }) => (None, true),
            _ => (None, false),
        }
    }
}

impl Offer {
    /// Hands the grants `admitted` (owner, token), made by the release's
    /// statement sent at `sent`, to the waiters still waiting, and forgets
    /// the releaser.
    pub(crate) fn settle(mut self, admitted: Vec<(String, i64)>, sent: Instant) -> Settled {
        self.settled = true;
        let mut names = self.turns.names();
        let Some(entries) = names.get_mut(&self.name) else {
            return Settled {
                orphans: admitted,
                wake: false,
            };
        };
        entries.remove(&self.owner);
        let mut settled = Settled {
            wake: !admitted.is_empty() || !self.waiters.is_empty(),
            ..Settled::default()
        };
        for (waiter, token) in admitted {
            let Some(entry) = entries.get_mut(&waiter) else {
                settled.orphans.push((waiter, token));
                continue;
            };
            match entry.state {
                State::Offered { ttl_ms, .. } | State::Waiting { ttl_ms, .. } => {
                    let ttl = Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0));
                    entry.state = State::Handed {
                        token,
                        sent,
                        until: sent + ttl,
                    };
                }
                // Its own attempt may yet free the grant, or find it: not
                // ours to hand over, nor to let go.
                State::Unsure => {}
                _ if entry.holds_token(token) => {}
                _ => settled.orphans.push((waiter, token)),
            }
        }
        // Those refused wait on; those that came after the offer was made
        // were not named, and look for themselves.
        for waiter in &self.waiters {
            if let Some(entry) = entries.get_mut(&waiter.owner) {
                entry.unoffer();
            }
        }
        settled.wake |= entries
            .values()
            .any(|e| matches!(e.state, State::Waiting { .. }));
        if entries.is_empty() {
            names.remove(&self.name);
        }
        settled
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        if !self.settled {
            self.turns
                .release_failed(&self.name, &self.owner, &self.waiters);
        }
    }
}

#[cfg(test)]
mod tests;
