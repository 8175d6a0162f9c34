//! Acquiring: queueing on a live session, waiting for the turn, and the
//! grant (a permit's own way is `semaphore_wait.rs`); the keys of an
//! acquire given up are deleted, now or at a later keep-alive.

use std::sync::Arc;

use lock_core::backend::{AcquireRequest, Backoff, Lease, Retry, WaitBudget};
use lock_core::{LockKind, Result};

use crate::layout::Line;
use crate::queue::{Ahead, Place, Queue, Requeue};
use crate::queued::{Queued, REQUEUES, session_lost};
use crate::session::Session;

impl Queue {
    /// One attempt: first in line is a grant (a permit: among the `N`
    /// oldest lease keys); anybody else in line makes it `None`.
    pub(crate) async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let mut queued = Queued::new(self, req);
        let granted = if let LockKind::Permit { permits } = req.kind {
            self.permit_attempt(req, permits, None, &mut queued).await
        } else {
            let line = self.layout.line(req);
            match self.join_queue(req, &line, &mut queued).await {
                Ok(Some((place, session))) => Ok(matches!(place.ahead, Ahead::Nobody)
                    .then(|| self.lease_for(req, &line.key, place.revision, &session))),
                Ok(None) => Err(session_lost()),
                Err(e) => Err(e),
            }
        };
        match granted {
            Ok(Some(lease)) => {
                queued.armed = false;
                Ok(Some(lease))
            }
            Ok(None) => {
                queued.leave().await;
                Ok(None)
            }
            Err(e) => {
                if !e.is_transient() {
                    queued.leave().await;
                }
                Err(e)
            }
        }
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
    /// keeping the session alive meanwhile.
    async fn attempt(
        &self,
        req: &AcquireRequest,
        budget: &WaitBudget,
        queued: &mut Queued,
    ) -> Result<Lease> {
        budget.attempted();
        if let LockKind::Permit { permits } = req.kind {
            return self
                .permit_attempt(req, permits, Some(budget), queued)
                .await?
                .ok_or_else(|| budget.exhausted(&req.name));
        }
        let line = self.layout.line(req);
        let Some((place, session)) = self.join_queue(req, &line, queued).await? else {
            return Err(session_lost());
        };
        if !matches!(place.ahead, Ahead::Nobody) {
            let _keeper = self.keep_queued(&session);
            if budget.is_over() {
                return Err(budget.exhausted(&req.name));
            }
            budget.waiting();
            self.wait_for_turn(req, &line, &place, &session, budget)
                .await?;
        }
        Ok(self.lease_for(req, &line.key, place.revision, &session))
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
