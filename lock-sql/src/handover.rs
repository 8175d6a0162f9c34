//! Hand-over between the read-write lock acquirers of one backend, where the
//! dialect can leave a group and admit waiters in one statement
//! (PostgreSQL's leaving function).
//!
//! The backend keeps, per lock name, what each of its acquirers is doing:
//! waiting (refused), handed a grant by a release, holding, or releasing. A
//! release names the waiters of this backend to its statement, which
//! deletes the releaser's row and then runs the admission for each waiter
//! in turn, inside the same transaction and under the group's row lock, so
//! the server's rule decides as it does for the waiter's own attempt. The
//! waiters admitted are handed their token and woken, and hold without a
//! statement of their own: a change of side costs the release's round trip
//! alone.
//!
//! What is known here is also used to skip attempts that would be refused:
//! a reader while a writer of this backend waits or holds, a writer while
//! anyone of this backend holds. Such a waiter is marked waiting, as a
//! refused one is, and the release of what blocks it names it. The server
//! decides every grant; what is skipped here only costs a wait, and every
//! way a blocker of this backend goes (a release, a give-up, a lease that
//! ran out) wakes the waiters or lets their next poll attempt for real.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// A side of a read-write lock, as the holders table's `kind` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

impl Side {
    fn tag(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Refused (or skipped); a release may admit it with this TTL.
    Waiting {
        ttl_ms: i64,
    },
    /// Named to a release under way, which answers it.
    Offered {
        ttl_ms: i64,
    },
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
    },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    side: Side,
    state: State,
}

impl Entry {
    /// Whether this entry keeps `side` out, as far as this backend knows.
    fn blocks(&self, side: Side, now: Instant) -> bool {
        let holds = match self.state {
            State::Waiting { .. } | State::Offered { .. } => {
                return side == Side::Read && self.side == Side::Write;
            }
            State::Handed { until, .. } | State::Holding { until, .. } => until > now,
            State::Releasing { .. } => true,
        };
        holds && (side == Side::Write || self.side == Side::Write)
    }

    /// Whether its grant's lease has run out.
    fn ran_out(&self, now: Instant) -> bool {
        matches!(self.state, State::Handed { until, .. } | State::Holding { until, .. } if until <= now)
    }

    /// Whether it holds the token `token` (a waiter's own grant, which an
    /// admission keeps rather than makes anew).
    fn holds_token(&self, token: i64) -> bool {
        matches!(self.state,
            State::Handed { token: t, .. } | State::Holding { token: t, .. } | State::Releasing { token: t }
                if t == token)
    }
}

/// A release under way and the waiters it names to its statement. Dropped
/// without [`settle`](Self::settle) (the statement failed, or the release
/// was cancelled), it forgets the releaser and puts the waiters it named
/// back to waiting, woken to look for themselves: an admission the
/// statement made is theirs to keep, and their own attempt finds it.
#[derive(Debug)]
#[must_use = "dropping the offer sends the waiters it names to look for themselves"]
pub(crate) struct Offer<'a> {
    turns: &'a Turns,
    name: String,
    owner: String,
    /// `owner:kind:ttl_ms`, comma-separated, writers first; empty for none.
    pub(crate) waiters: String,
    offered: usize,
    settled: bool,
}

/// What a release leaves to do once its statement answered.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Grants made for acquirers no longer waiting: each to be left.
    pub(crate) orphans: Vec<(String, i64)>,
    /// Whether local waiters should look again.
    pub(crate) wake: bool,
}

/// The read-write acquirers of one backend, by lock name and owner.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    names: Mutex<HashMap<String, HashMap<String, Entry>>>,
}

impl Turns {
    fn names(&self) -> MutexGuard<'_, HashMap<String, HashMap<String, Entry>>> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The grant a release handed `owner`, which then holds for `ttl` from
    /// the release's send.
    pub(crate) fn take_handed(&self, name: &str, owner: &str) -> Option<(i64, Instant)> {
        let mut names = self.names();
        let entry = names.get_mut(name)?.get_mut(owner)?;
        let State::Handed { token, sent, until } = entry.state else {
            return None;
        };
        entry.state = State::Holding { token, until };
        Some((token, sent))
    }

    /// Whether an attempt of `owner` for `side` would be refused because of
    /// an acquirer of this backend; if so, `owner` is marked waiting.
    pub(crate) fn blocked_here(&self, name: &str, owner: &str, side: Side, ttl: Duration) -> bool {
        let mut names = self.names();
        let Some(entries) = names.get_mut(name) else {
            return false;
        };
        if let Some(Entry {
            state: State::Offered { .. },
            ..
        }) = entries.get(owner)
        {
            // The release that named it answers, and wakes it.
            return true;
        }
        let now = Instant::now();
        // A lease nobody released (its guard forgotten) stops counting at
        // its end, and its entry goes.
        entries.retain(|_, e| !e.ran_out(now));
        let blocked = entries
            .iter()
            .any(|(o, e)| o != owner && e.blocks(side, now));
        if blocked {
            entries.insert(owner.to_owned(), waiting(side, ttl));
        }
        blocked
    }

    /// The outcome of `owner`'s own attempt, sent at `sent`: holding
    /// `token`, or waiting (unless a release handed it a grant meanwhile).
    pub(crate) fn attempted(
        &self,
        name: &str,
        owner: &str,
        side: Side,
        ttl: Duration,
        sent: Instant,
        token: Option<i64>,
    ) {
        let mut names = self.names();
        let entries = names.entry(name.to_owned()).or_default();
        let entry = match token {
            Some(token) => Entry {
                side,
                state: State::Holding {
                    token,
                    until: sent + ttl,
                },
            },
            None if matches!(
                entries.get(owner),
                Some(Entry {
                    state: State::Handed { .. } | State::Offered { .. },
                    ..
                })
            ) =>
            {
                return;
            }
            None => waiting(side, ttl),
        };
        entries.insert(owner.to_owned(), entry);
    }

    /// `owner`'s lease renewed until `until`.
    pub(crate) fn renewed(&self, name: &str, owner: &str, until: Instant) {
        if let Some(entry) = self.names().get_mut(name).and_then(|e| e.get_mut(owner))
            && let State::Holding { until: held, .. } = &mut entry.state
        {
            *held = until;
        }
    }

    /// The waiters `owner`'s release of `token` names to its statement: none
    /// while another acquirer of this backend holds (nobody waiting could
    /// be admitted), else every waiter, writers first. Marks `owner`
    /// releasing.
    pub(crate) fn offer(&self, name: &str, owner: &str, side: Side, token: i64) -> Offer<'_> {
        let mut names = self.names();
        let entries = names.entry(name.to_owned()).or_default();
        entries.insert(
            owner.to_owned(),
            Entry {
                side,
                state: State::Releasing { token },
            },
        );
        let now = Instant::now();
        let others_hold = entries.iter().any(|(o, e)| {
            o != owner
                && matches!(e.state,
                    State::Handed { until, .. } | State::Holding { until, .. } if until > now)
        });
        let mut waiters = Vec::new();
        if !others_hold {
            for (o, e) in entries.iter_mut() {
                if let State::Waiting { ttl_ms } = e.state {
                    e.state = State::Offered { ttl_ms };
                    waiters.push((e.side, o, ttl_ms));
                }
            }
        }
        // Writers first: a writer admitted keeps the readers after it out,
        // as its waiting row would have.
        waiters.sort_by_key(|(side, ..)| *side == Side::Read);
        let offered = waiters.len();
        let waiters = waiters
            .into_iter()
            .map(|(side, o, ttl_ms)| format!("{o}:{}:{ttl_ms}", side.tag()))
            .collect::<Vec<_>>()
            .join(",");
        Offer {
            turns: self,
            name: name.to_owned(),
            owner: owner.to_owned(),
            waiters,
            offered,
            settled: false,
        }
    }

    /// Forgets `owner`, whose release failed, and puts the waiters named
    /// to it back to waiting.
    fn release_failed(&self, name: &str, owner: &str) {
        let mut names = self.names();
        let Some(entries) = names.get_mut(name) else {
            return;
        };
        entries.remove(owner);
        for entry in entries.values_mut() {
            if let State::Offered { ttl_ms } = entry.state {
                entry.state = State::Waiting { ttl_ms };
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
        match self.forget(name, owner) {
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

    fn forget(&self, name: &str, owner: &str) -> Option<Entry> {
        let mut names = self.names();
        let entries = names.get_mut(name)?;
        let gone = entries.remove(owner);
        if entries.is_empty() {
            names.remove(name);
        }
        gone
    }
}

impl Offer<'_> {
    /// Hands the grants `admitted` (owner, token), made by the release's
    /// statement sent at `sent`, to the waiters still waiting, and forgets
    /// the releaser.
    pub(crate) fn settle(mut self, admitted: Vec<(String, i64)>, sent: Instant) -> Settled {
        self.settled = true;
        let (name, owner) = (self.name.as_str(), self.owner.as_str());
        let mut names = self.turns.names();
        let Some(entries) = names.get_mut(name) else {
            return Settled {
                orphans: admitted,
                wake: false,
            };
        };
        entries.remove(owner);
        let mut settled = Settled {
            wake: !admitted.is_empty() || self.offered > 0,
            ..Settled::default()
        };
        for (waiter, token) in admitted {
            match entries.get_mut(&waiter) {
                Some(entry)
                    if matches!(entry.state, State::Offered { .. } | State::Waiting { .. }) =>
                {
                    let (State::Offered { ttl_ms } | State::Waiting { ttl_ms }) = entry.state
                    else {
                        unreachable!("matched above");
                    };
                    let ttl = Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0));
                    entry.state = State::Handed {
                        token,
                        sent,
                        until: sent + ttl,
                    };
                }
                Some(entry) if entry.holds_token(token) => {}
                _ => settled.orphans.push((waiter, token)),
            }
        }
        // Those refused wait on; those that came after the offer was made
        // were not named, and look for themselves.
        for entry in entries.values_mut() {
            if let State::Offered { ttl_ms } = entry.state {
                entry.state = State::Waiting { ttl_ms };
            }
            settled.wake |= matches!(entry.state, State::Waiting { .. });
        }
        if entries.is_empty() {
            names.remove(name);
        }
        settled
    }
}

impl Drop for Offer<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.turns.release_failed(&self.name, &self.owner);
        }
    }
}

fn waiting(side: Side, ttl: Duration) -> Entry {
    Entry {
        side,
        state: State::Waiting {
            ttl_ms: crate::client::ttl_ms(ttl),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn waiters_skip_what_this_backend_holds_until_its_lease_ends() {
        let turns = Turns::default();
        let now = Instant::now();
        turns.attempted("n", "w", Side::Write, TTL, now, Some(1));
        assert!(turns.blocked_here("n", "r", Side::Read, TTL));
        assert!(turns.blocked_here("n", "v", Side::Write, TTL));
        assert!(
            !turns.blocked_here("m", "r", Side::Read, TTL),
            "another name"
        );
        // Readers share; a waiting writer keeps arriving readers back.
        turns.attempted("s", "r1", Side::Read, TTL, now, Some(2));
        assert!(!turns.blocked_here("s", "r2", Side::Read, TTL));
        turns.attempted("s", "w", Side::Write, TTL, now, None);
        assert!(turns.blocked_here("s", "r3", Side::Read, TTL));
        // A lease that ran out blocks nobody.
        turns.attempted("e", "w", Side::Write, Duration::ZERO, now, Some(3));
        assert!(!turns.blocked_here("e", "r", Side::Read, TTL));
    }

    #[tokio::test]
    async fn a_release_names_its_waiters_and_hands_them_their_grants() {
        let turns = Turns::default();
        let now = Instant::now();
        turns.attempted("n", "w", Side::Write, TTL, now, Some(1));
        for reader in ["r1", "r2"] {
            assert!(turns.blocked_here("n", reader, Side::Read, TTL));
        }
        turns.attempted("n", "v", Side::Write, TTL, now, None);
        let offer = turns.offer("n", "w", Side::Write, 1);
        let named: Vec<_> = offer.waiters.split(',').collect();
        assert_eq!(named.len(), 3);
        assert!(named[0].starts_with("v:write:"), "writers first: {named:?}");
        // Named to the release: they wait for its answer.
        assert!(turns.blocked_here("n", "r1", Side::Read, TTL));
        assert!(turns.gave_up("n", "r2").0.is_none());
        let settled = offer.settle(vec![("v".into(), 2), ("r2".into(), 3)], now);
        assert_eq!(settled.orphans, vec![("r2".to_owned(), 3)], "r2 gave up");
        assert!(settled.wake);
        assert_eq!(turns.take_handed("n", "v").map(|(t, _)| t), Some(2));
        assert_eq!(turns.take_handed("n", "r1"), None, "refused: waits on");
        // While v holds, a release of another names nobody.
        let offer = turns.offer("n", "x", Side::Read, 9);
        assert!(offer.waiters.is_empty());
        drop(offer);
    }

    #[tokio::test]
    async fn a_release_that_fails_sends_its_waiters_to_look_for_themselves() {
        let turns = Turns::default();
        let now = Instant::now();
        turns.attempted("n", "w", Side::Write, TTL, now, Some(1));
        assert!(turns.blocked_here("n", "r", Side::Read, TTL));
        drop(turns.offer("n", "w", Side::Write, 1));
        assert!(!turns.blocked_here("n", "r", Side::Read, TTL), "w is gone");
        // A grant the release made, and the waiter's own attempt kept, is
        // no orphan.
        turns.attempted("n", "r", Side::Read, TTL, now, Some(4));
        let offer = turns.offer("n", "q", Side::Read, 5);
        let settled = offer.settle(vec![("r".into(), 4)], now);
        assert!(settled.orphans.is_empty());
    }
}
