//! [`RedlockBackend`]: the Redlock algorithm over independent Redis masters.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    AcquireRequest, BackendStats, Holder, Lease, LockBackend, ReleaseSignals, WaitBudget,
    async_trait, poll_acquire_signalled,
};
use lock_core::{Capabilities, Error, Family, Fencing, FencingToken, LockKind, LockName, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::majority::{Answers, Member, grant_on, holds_on, renew_on};

/// Redlock over N independent masters (see the crate docs).
#[derive(Debug)]
pub struct RedlockBackend {
    pub(crate) members: Vec<Arc<Member>>,
    pub(crate) connecting: Vec<JoinHandle<()>>,
    pub(crate) quorum: usize,
    pub(crate) node_timeout: Duration,
    pub(crate) retry_delay: Duration,
    pub(crate) signals: ReleaseSignals,
}

impl RedlockBackend {
    /// Wakes local waiters after a release: one for the lock; every one
    /// for a read-write lock, whose release may let many readers in.
    fn wake(&self, name: &LockName, kind: LockKind) {
        match kind.family() {
            Family::ReadWrite => self.signals.notify_all(name),
            _ => self.signals.notify(name),
        }
    }
}

#[async_trait]
impl LockBackend for RedlockBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(crate::NAME, Fencing::BestEffort)
            .with_read_write(true)
            .with_survives_node_loss(true)
            .with_ordered_requests(true)
            .with_ttl_range(self.node_timeout * 2, Capabilities::DEFAULT_MAX_TTL)
    }

    /// `wakeups`: releases in this process that woke a local waiter.
    fn stats(&self) -> BackendStats {
        self.signals.stats()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        // `Locker` checks this too; a caller of the backend itself must not
        // get a semaphore, which majorities cannot keep.
        self.capabilities().check_kind(req.kind)?;
        let limit = self.node_limit(req.ttl);
        let sent = Instant::now();
        let outcomes = self
            .on_members(self.members.iter(), limit, |n| grant_on(n, req))
            .await;
        let tokens: Vec<FencingToken> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok().copied().flatten())
            .collect();
        if tokens.len() >= self.quorum && Self::still_valid(sent, req.ttl) {
            let token = tokens.iter().copied().max().unwrap_or(FencingToken::new(0));
            return Ok(Some(Lease::granted(req, token, sent)));
        }
        // Give back what this attempt may hold: the grants, and whatever a
        // node that did not answer may have applied. A node that answered
        // that the key exists refused this attempt's `SET NX`, which set
        // nothing, so an attempt that lost everywhere (the common case
        // under contention) costs no second wave.
        let maybe_ours = self
            .members
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| !matches!(o, Ok(None)))
            .map(|(m, _)| m);
        if maybe_ours.clone().next().is_some() {
            self.release_on_members(maybe_ours, req, limit).await;
        }
        let answers = Answers::of(outcomes);
        if answers.ok.len() < self.quorum {
            return Err(self.no_answer_quorum("acquire", &answers, limit));
        }
        if tokens.len() >= self.quorum {
            return Err(Error::timeout(
                "acquire on a majority before the lease's validity ran out",
                sent.elapsed(),
            ));
        }
        Ok(None)
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire_signalled(self, req, budget, &self.signals, self.retry_delay).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let limit = self.node_limit(ttl);
        let sent = Instant::now();
        let answers = self.on_every(limit, |n| renew_on(n, lease, ttl)).await;
        let extended = answers.ok.iter().filter(|e| **e).count();
        let refused = answers.ok.len() - extended;
        if extended >= self.quorum && Self::still_valid(sent, ttl) {
            return Ok(lease.renewed(ttl, sent));
        }
        if refused > self.members.len() - self.quorum {
            return Err(Error::not_held(lease.name()));
        }
        Err(self.no_answer_quorum("renew", &answers, limit))
    }

    /// Ours while a majority of masters hold our key and the lease's
    /// validity, counted on this client's clock, has not run out.
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let limit = self.node_limit(lease.ttl());
        let answers = self.on_every(limit, |n| holds_on(n, lease)).await;
        let holding = answers.ok.iter().filter(|h| **h).count();
        if holding >= self.quorum {
            return Ok(!lease.is_expired());
        }
        if answers.ok.len() - holding > self.members.len() - self.quorum {
            return Ok(false);
        }
        Err(self.no_answer_quorum("check the owner", &answers, limit))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let limit = self.node_limit(lease.ttl());
        let answers = self
            .release_everywhere(lease.name(), lease.kind(), lease.owner(), limit)
            .await;
        self.wake(lease.name(), lease.kind());
        let deleted = answers.ok.iter().filter(|d| **d).count();
        if deleted >= self.quorum {
            Ok(())
        } else if answers.ok.len() < self.quorum {
            Err(self.no_answer_quorum("release", &answers, limit))
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.release_everywhere(&req.name, req.kind, req.owner, self.node_limit(req.ttl))
            .await;
        self.wake(&req.name, req.kind);
        Ok(())
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let answers = self.on_every(self.node_timeout, |n| n.holder(name)).await;
        if answers.ok.len() < self.quorum {
            return Err(self.no_answer_quorum("holder", &answers, self.node_timeout));
        }
        let held: Vec<_> = answers.ok.into_iter().flatten().collect();
        // The holder is whoever holds the key on a majority, if anybody does.
        let Some(owner) = held
            .iter()
            .map(|h| &h.owner)
            .find(|o| held.iter().filter(|h| &h.owner == *o).count() >= self.quorum)
        else {
            return Ok(None);
        };
        let remaining = held
            .iter()
            .filter(|h| &h.owner == owner)
            .map(|h| h.remaining)
            .min();
        Ok(Some(Holder::without_token(owner, remaining)))
    }
}
