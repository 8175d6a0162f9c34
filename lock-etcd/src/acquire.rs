//! Acquiring: queueing on a live session, waiting for the turn, and the
//! grant (for a permit, once a permit is free too); the keys of an acquire
//! given up are deleted, now or at a later keep-alive.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Backoff, Lease, Retry, WaitBudget};
use lock_core::{Error, LockKind, Result};

use crate::handover::release_and_hand_over;
use crate::layout::Line;
use crate::mark::Mark;
use crate::queue::{Ahead, Place, Queue, Requeue};
use crate::session::Session;

impl Queue {
    /// One attempt: first in line is a grant, except that a semaphore's
    /// internal lock also needs a free permit. Anybody else in line (for a
    /// semaphore: somebody holding its internal lock, who may be about to
    /// take the last permit) makes it `None`.
    pub(crate) async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let line = self.layout.line(req);
        let mut queued = Queued::new(self, req);
        let Some((place, session)) = self.join_queue(req, &line, &mut queued).await? else {
            queued.leave().await;
            return Err(session_lost());
        };
        if matches!(place.ahead, Ahead::Nobody)
            && let Some(lease) = self.grant(req, &line, &place, &session, None).await?
        {
            queued.armed = false;
            return Ok(Some(lease));
        }
        queued.leave().await;
        Ok(None)
    }

    pub(crate) async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        let mut queued = Queued::new(self, req);
        let mut retry = Retry::new(crate::NAME, budget, Backoff::new());
        loop {
            match self.attempt(req, budget, &mut queued).await {
                Ok(lease) => {
                    queued.armed = false;
                    return Ok(lease);
                }
                // A member died or an election is running: queue again
                // (idempotent: same key, same place if it survived) within
                // the budget.
                Err(e) => {
                    if let Err(e) = retry.after(e).await {
                        // The server answered: leave now, so that the queue
                        // is as the caller left it. It did not: leave in the
                        // background (`Queued`'s drop), not in front of the
                        // caller.
                        if !e.is_transient() {
                            queued.leave().await;
                        }
                        return Err(e);
                    }
                }
            }
        }
    }

    /// The session a grant was made on, from the lease ID its lease carries
    /// as its version, if this client granted that session and it may still
    /// be alive.
    pub(crate) fn session_of(&self, lease: &Lease) -> Option<Arc<Session>> {
        let id = i64::try_from(lease.version()?).ok()?;
        self.sessions.by_id(id)
    }

    /// One attempt of `acquire`: queue on a current session (again, at most
    /// [`REQUEUES`] times, if it turns out gone), then wait for our turn,
    /// keeping the session alive meanwhile (for a permit, also while it
    /// waits for a lease key to go).
    async fn attempt(
        &self,
        req: &AcquireRequest,
        budget: &WaitBudget,
        queued: &mut Queued,
    ) -> Result<Lease> {
        budget.attempted();
        let line = self.layout.line(req);
        let Some((place, session)) = self.join_queue(req, &line, queued).await? else {
            return Err(session_lost());
        };
        let first = matches!(place.ahead, Ahead::Nobody);
        let permit = matches!(req.kind, LockKind::Permit { .. });
        let _keeper = (!first || permit).then(|| self.keep_queued(&session));
        if !first {
            if budget.is_over() {
                return Err(budget.exhausted(&req.name));
            }
            budget.waiting();
            self.wait_for_turn(req, &line, &place, &session, budget)
                .await?;
        }
        self.grant(req, &line, &place, &session, Some(budget))
            .await?
            .ok_or_else(|| budget.exhausted(&req.name))
    }

    /// The grant to `place`, first in `line`. A permit is taken by the
    /// holder of the semaphore's internal lock (waiting within `budget` if
    /// it is given one), which then passes that lock on.
    async fn grant(
        &self,
        req: &AcquireRequest,
        line: &Line,
        place: &Place,
        session: &Arc<Session>,
        budget: Option<&WaitBudget>,
    ) -> Result<Option<Lease>> {
        let LockKind::Permit { permits } = req.kind else {
            return Ok(Some(self.lease_for(
                req,
                &line.key,
                place.revision,
                session,
            )));
        };
        let lease = self.take_permit(req, permits, session, budget).await?;
        if lease.is_some() {
            self.pass_turn(req, line, place).await;
        }
        Ok(lease)
    }

    /// Releases a semaphore's internal lock once the permit is ours,
    /// handing it to the next contender of this backend if it waits. The
    /// permit is held whatever happens here: a key the server could not be
    /// told to delete is left to the session's next keep-alive.
    async fn pass_turn(&self, req: &AcquireRequest, line: &Line, place: &Place) {
        let handed = release_and_hand_over(&self.core, &self.handovers, &line.key, place.revision);
        if let Err(e) = handed.await {
            tracing::debug!(error = %e, "could not pass a semaphore's internal lock on; the next keep-alive will");
            self.sessions.orphan(&line.key, &Mark::of(req), req.ttl);
        }
    }

    /// Puts our key in `line` on a live session: the session for the
    /// TTL, then the queue `Txn`, on a new session when that one turned out
    /// dead, up to [`REQUEUES`] sessions. `None` when every one was dead.
    async fn join_queue(
        &self,
        req: &AcquireRequest,
        line: &Line,
        queued: &mut Queued,
    ) -> Result<Option<(Place, Arc<Session>)>> {
        for _ in 0..REQUEUES {
            let session = self.sessions.session(req.ttl).await?;
            queued.session = Some(session.clone());
            match self.enqueue(req, line, &session).await? {
                Ok(place) => return Ok(Some((place, session))),
                Err(Requeue) => continue,
            }
        }
        Ok(None)
    }
}

/// How many sessions one attempt tries before it reports an outage.
const REQUEUES: usize = 3;

fn session_lost() -> Error {
    Error::unavailable(
        crate::NAME,
        "session leases expired as soon as they were granted",
    )
}

/// An acquisition's keys (in line, and a permit's lease key) until it is
/// granted or has left. If the acquire's future is dropped before either (a
/// caller of the backend that does not go through `Locker`), the keys are
/// deleted in the background: on a session lease other locks keep alive,
/// nothing else would ever delete them.
struct Queued {
    queue: Queue,
    keys: Vec<String>,
    mark: Mark,
    ttl: Duration,
    session: Option<Arc<Session>>,
    armed: bool,
}

impl Queued {
    fn new(queue: &Queue, req: &AcquireRequest) -> Self {
        Self {
            queue: queue.clone(),
            keys: queue.layout.keys_of(req),
            mark: Mark::of(req),
            ttl: req.ttl,
            session: None,
            armed: true,
        }
    }

    /// Leaves the queue now (or, if the server cannot be reached, at the
    /// session's next keep-alive).
    async fn leave(&mut self) {
        if self.session.is_some()
            && let Err(e) = self
                .queue
                .sessions
                .leave_or_orphan(&self.keys, &self.mark, self.ttl)
                .await
        {
            tracing::debug!(error = %e, "could not leave the queue; the next keep-alive will");
        }
        self.armed = false;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.armed || self.session.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime: the session's lease expires with the process
        };
        let (sessions, keys, mark, ttl) = (
            self.queue.sessions.clone(),
            std::mem::take(&mut self.keys),
            self.mark.clone(),
            self.ttl,
        );
        runtime.spawn(async move {
            let _ = sessions.leave_or_orphan(&keys, &mark, ttl).await;
        });
    }
}
