//! One attempt on every master: granted when a majority granted it within
//! the lease's validity, else given back.

use std::future::Future;

use lock_core::backend::{AcquireRequest, Lease};
use lock_core::{Error, FencingToken, LockKind, Result};
use lock_redis::node::Node;
use tokio::time::Instant;

use crate::majority::{Answers, Majority};

/// One node's part of an acquire of `req`: the mutex's bare `SET NX PX`
/// with the node's clock as token, or a read-write lock's group script.
pub(crate) async fn grant_on(n: &Node, req: &AcquireRequest) -> Result<Option<FencingToken>> {
    match req.kind {
        LockKind::Exclusive => n.acquire_stamped(&req.name, req.owner, req.ttl).await,
        _ => n.grant(req).await,
    }
}

impl Majority {
    /// Runs `op`, one master's part of `req`'s grant, on every master at
    /// once: a lease with the largest token of a majority that granted it
    /// while the lease was still valid, or `None` when too few did (and
    /// what this attempt may hold is given back).
    pub(crate) async fn grant<'a, F, Fut>(
        &'a self,
        req: &'a AcquireRequest,
        op: F,
    ) -> Result<Option<Lease>>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = Result<Option<FencingToken>>>,
    {
        let limit = self.node_limit(req.ttl);
        let sent = Instant::now();
        let outcomes = self.on_members(self.members().iter(), limit, op).await;
        let tokens: Vec<FencingToken> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok().copied().flatten())
            .collect();
        if tokens.len() >= self.quorum() && Majority::still_valid(sent, req.ttl) {
            let token = tokens.iter().copied().max().unwrap_or(FencingToken::new(0));
            return Ok(Some(Lease::granted(req, token, sent)));
        }
        // Give back what this attempt may hold: the grants, and whatever a
        // node that did not answer may have applied. A node that answered
        // that the key exists refused this attempt's `SET NX`, which set
        // nothing, so an attempt that lost everywhere (the common case
        // under contention) costs no second wave.
        let maybe_ours = self
            .members()
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| !matches!(o, Ok(None)))
            .map(|(m, _)| m);
        if maybe_ours.clone().next().is_some() {
            self.release_on_members(maybe_ours, req, limit).await;
        }
        let answers = Answers::of(outcomes);
        if answers.ok.len() < self.quorum() {
            return Err(self.no_answer_quorum("acquire", &answers, limit));
        }
        if tokens.len() >= self.quorum() {
            return Err(Error::timeout(
                "acquire on a majority before the lease's validity ran out",
                sent.elapsed(),
            ));
        }
        Ok(None)
    }
}
