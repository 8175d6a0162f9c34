//! Taking a permit (`semaphore.rs` has the requests): put our lease key
//! and, unless it holds at once, wait the way its rank says. A key's rank
//! drops when any older key goes, so no single key tells every waiter its
//! turn; instead each waiter watches one thing:
//!
//! - the first waiter (just after the `N` oldest keys, the holders) watches
//!   the range for deletions, and holds as soon as one of those `N` goes:
//!   no read, since nothing older than it can come;
//! - a waiter further back watches the key just before its own, and reads
//!   again when that key changes: gone, or put again by its grant (the
//!   word that it holds, so that this one may be first now).
//!
//! A release wakes the first waiter; its grant wakes the one behind it:
//! two wake-ups at most. A release of this backend grants a first waiter
//! of this backend in its own `Txn` (`release_permit`), so that waiter
//! sends nothing more when the release's deletion wakes it. Each watch
//! starts at the present (see `wait_for_turn`), with a read sent beside it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchStream};
use lock_core::backend::{AcquireRequest, Lease, Registration, WaitBudget};
use lock_core::{LockName, Result};

use crate::catch_up::{LOOKS, watched_or_looked};
use crate::client::next_message;
use crate::handover::PermitWaiter;
use crate::queue::{Queue, Requeue};
use crate::queued::{Queued, REQUEUES, session_lost};
use crate::semaphore::{Permits, Rank, Standing};
use crate::session::Session;

/// What ended a wait on the watch.
enum Woken {
    Watched(Change),
    /// A look found our standing changed (`catch_up.rs`).
    Looked(Standing),
}

/// Whether a release of ours granted us through `registration`, on a
/// session fresh enough to count on (else the waiter reads or puts its
/// grant itself); the budget's error once it runs out.
async fn handed_over(
    registration: Registration<PermitWaiter, ()>,
    session: &Session,
    budget: &WaitBudget,
    name: &LockName,
) -> Result<bool> {
    let Some(handed) = budget.race(registration.handed_over()).await else {
        return Err(budget.exhausted(name));
    };
    Ok(handed.is_some() && !session.is_stale() && !session.is_gone())
}

/// What a watch event meant to a waiter.
enum Change {
    /// A key ahead of the first waiter went: the permit is ours.
    Freed(Vec<u8>),
    /// The key just before ours changed: read again.
    Moved,
}

impl Queue {
    /// One attempt at a permit of `permits` for `req`: `None` if none is
    /// free and there is no `budget` to wait in (a try).
    pub(crate) async fn permit_attempt(
        &self,
        req: &AcquireRequest,
        permits: u32,
        budget: Option<&WaitBudget>,
        queued: &mut Queued,
    ) -> Result<Option<Lease>> {
        let line = Permits::new(self, req, permits);
        let Some((standing, session)) = self.put_permit(&line, queued).await? else {
            return Err(session_lost());
        };
        let revision = standing.revision;
        match standing.rank {
            Rank::Held { signal: false } => {}
            Rank::Held { signal: true } => line.grant(revision, &session).await?,
            _ => {
                let Some(budget) = budget else {
                    return Ok(None);
                };
                if budget.is_over() {
                    return Err(budget.exhausted(&req.name));
                }
                budget.waiting();
                let _keeper = self.keep_queued(&session);
                self.wait_for_permit(&line, standing, &session, budget)
                    .await?;
            }
        }
        Ok(Some(self.lease_for(req, &line.key, revision, &session)))
    }

    /// Puts our lease key on a live session, on a new session when that
    /// one turned out dead, up to [`REQUEUES`] sessions.
    async fn put_permit(
        &self,
        line: &Permits<'_>,
        queued: &mut Queued,
    ) -> Result<Option<(Standing, Arc<Session>)>> {
        for _ in 0..REQUEUES {
            let session = self.sessions.session(line.req.ttl).await?;
            queued.session = Some(session.clone());
            match line.put(&session).await? {
                Ok(standing) => return Ok(Some((standing, session))),
                Err(Requeue) => continue,
            }
        }
        Ok(None)
    }

    /// Waits until our key is among the `N` oldest, and takes the permit
    /// (see [`Permits::grant`]).
    ///
    /// Each watch is opened from the present together with a read of where
    /// we stand: a read answered at or after the watch's start leaves no
    /// event unseen between them, in one round trip. What to watch is the
    /// last read's guess, and after a wake-up the range: the key before
    /// ours changed, mostly because it was granted, which makes us first.
    async fn wait_for_permit(
        &self,
        line: &Permits<'_>,
        mut standing: Standing,
        session: &Arc<Session>,
        budget: &WaitBudget,
    ) -> Result<()> {
        let name = &line.req.name;
        let mut target = Target::of(&standing.rank);
        loop {
            let Some(watching) = target.take() else {
                return self.take_if_held(line, &standing, session).await;
            };
            if budget.is_over() {
                return Err(budget.exhausted(name));
            }
            let revision = standing.revision;
            let (watch, now) = tokio::join!(
                self.core.watch_from_now(
                    "watch for a permit",
                    watching.key(line),
                    watching.options()
                ),
                line.read(revision, session),
            );
            let (mut stream, created_at) = match watch {
                Ok(watch) => watch,
                Err(e) if e.is_retryable() && !budget.is_over() => {
                    tracing::debug!(error = %e, "could not watch for a permit; reading again");
                    standing = now?;
                    target = Target::of(&standing.rank);
                    continue;
                }
                Err(e) => return Err(e),
            };
            standing = now?;
            if standing.read_at < created_at {
                standing = line.read(revision, session).await?;
            }
            if Target::of(&standing.rank).as_ref() != Some(&watching) {
                target = Target::of(&standing.rank);
                continue; // something else to watch, or held
            }
            // A release of this backend may grant us (see `handover.rs`);
            // a key that is not UTF-8 is none of ours.
            let registrations: Vec<_> = match &standing.rank {
                Rank::First(ahead) => ahead
                    .iter()
                    .filter_map(|k| std::str::from_utf8(k).ok())
                    .map(|k| {
                        let waiter = PermitWaiter {
                            key: line.key.clone(),
                            revision,
                            session: session.id,
                            owner: line.req.owner.to_hex(),
                        };
                        let registration = self.permit_handovers.register(k, waiter, budget);
                        (k.as_bytes().to_vec(), registration)
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let event = async {
                changed(&mut stream, &standing, line.key.as_bytes())
                    .await
                    .map(Woken::Watched)
            };
            // The watch may have started behind (see `catch_up.rs`).
            let look = || async {
                let now = line.read(revision, session).await?;
                let moved = Target::of(&now.rank).as_ref() != Some(&watching);
                Ok(moved.then_some(Woken::Looked(now)))
            };
            match budget.race(watched_or_looked(event, look, LOOKS)).await {
                None => return Err(budget.exhausted(name)),
                Some(Err(e)) if e.is_retryable() && !budget.is_over() => {
                    tracing::debug!(error = %e, "watch for a permit failed; reading again");
                    target = Some(watching);
                }
                Some(Ok(Woken::Looked(now))) => {
                    // What the event would have told, told sooner. Held: a
                    // release of ours may be granting us, and its grant
                    // spares `take_if_held` its own.
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                    budget.attempted();
                    if Target::of(&now.rank).is_none() {
                        for (_, registration) in registrations {
                            if handed_over(registration, session, budget, name).await? {
                                return Ok(());
                            }
                        }
                    }
                    standing = now;
                    target = Target::of(&standing.rank);
                }
                Some(Err(e)) => return Err(e),
                Some(Ok(Woken::Watched(change))) => {
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                    budget.attempted();
                    let Change::Freed(freed) = change else {
                        target = Some(Target::Range);
                        continue;
                    };
                    let mut registrations = registrations;
                    if let Some(at) = registrations.iter().position(|(k, _)| *k == freed) {
                        let (_, registration) = registrations.swap_remove(at);
                        drop(registrations);
                        if handed_over(registration, session, budget, name).await? {
                            return Ok(());
                        }
                    }
                    return line.grant(revision, session).await;
                }
            }
        }
    }

    /// The end of a wait whose last read found our key among the `N`
    /// oldest: the grant's put if a waiter may be behind us.
    async fn take_if_held(
        &self,
        line: &Permits<'_>,
        standing: &Standing,
        session: &Arc<Session>,
    ) -> Result<()> {
        match standing.rank {
            Rank::Held { signal: true } => line.grant(standing.revision, session).await,
            Rank::Held { signal: false } => Ok(()),
            _ => Err(crate::queue::unexpected()),
        }
    }
}

/// What a waiter watches.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// The lease range's deletions: a first waiter's.
    Range,
    /// The key just before ours.
    Key(Vec<u8>),
}

impl Target {
    /// What `rank` has us watch: nothing once held.
    fn of(rank: &Rank) -> Option<Self> {
        match rank {
            Rank::Held { .. } => None,
            Rank::First(_) => Some(Self::Range),
            Rank::Behind(key) => Some(Self::Key(key.clone())),
        }
    }

    fn key(&self, line: &Permits<'_>) -> Vec<u8> {
        match self {
            Self::Range => line.leases.clone().into_bytes(),
            Self::Key(key) => key.clone(),
        }
    }

    fn options(&self) -> Option<WatchOptions> {
        match self {
            Self::Range => Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_filters([WatchFilterType::NoPut]),
            ),
            Self::Key(_) => None,
        }
    }
}

/// The first event on `stream` after `standing`'s read that changes
/// anything for us: the deletion of a key ahead of a first waiter, or any
/// change of the key just before ours. Our own key deleted (its session
/// expired) is [`NotHeld`](lock_core::Error::NotHeld)-worthy: reported as
/// `Moved`, and the read that follows finds it gone.
async fn changed(stream: &mut WatchStream, standing: &Standing, ours: &[u8]) -> Result<Change> {
    loop {
        let message = next_message(stream, "watch").await?;
        for event in message.events() {
            let Some(kv) = event.kv() else { continue };
            if kv.mod_revision() <= standing.read_at {
                continue;
            }
            match &standing.rank {
                Rank::First(ahead) if event.event_type() == EventType::Delete => {
                    if ahead.iter().any(|k| k.as_slice() == kv.key()) {
                        return Ok(Change::Freed(kv.key().to_vec()));
                    }
                    if kv.key() == ours {
                        return Ok(Change::Moved);
                    }
                }
                Rank::Behind(_) => return Ok(Change::Moved),
                _ => {}
            }
        }
    }
}
