//! Elections on Redlock: a leader is a grant on a majority of masters, as
//! the mutex's holder is, under the election's own keys on each (see
//! lock-redis's `Keys::mutex`). Its term is one the client proposes and
//! every master of the majority stores with the grant, so that a majority
//! can be read back agreeing on the leader and its term.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use lock_core::backend::{AcquireRequest, Leader, Lease};
use lock_core::{Error, FencingToken, LockKind, LockName, Result};
use lock_redis::election::Elected;
use lock_redis::node::{Node, NodeHolder};

use crate::majority::Majority;

/// Grants the election `req` on a majority of masters, proposing this
/// client's clock in microseconds as the term. A master refuses a term
/// not above the latest it granted, so a later leader's term is above an
/// earlier one's on the master their majorities share; when a master
/// refused a proposal for that alone (this client's clock is behind the
/// one that proposed the latest term), the attempt is made once more at
/// once, above the latest term reported.
pub(crate) async fn campaign(majority: &Majority, req: &AcquireRequest) -> Result<Option<Lease>> {
    let latest = AtomicU64::new(0);
    let term = clock_micros();
    let lease = majority
        .grant(req, |n| elect_on(n, req, term, &latest))
        .await?;
    let latest = latest.into_inner();
    if lease.is_some() || latest == 0 {
        return Ok(lease);
    }
    let term = clock_micros().max(latest + 1);
    let ignored = AtomicU64::new(0);
    majority
        .grant(req, |n| elect_on(n, req, term, &ignored))
        .await
}

/// One master's part of a campaign; a term refused as too low is noted
/// in `latest`.
async fn elect_on(
    n: &Node,
    req: &AcquireRequest,
    term: u64,
    latest: &AtomicU64,
) -> Result<Option<FencingToken>> {
    Ok(match n.elect(req, term).await? {
        Elected::Granted(term) => Some(term),
        Elected::Held => None,
        Elected::Behind(last) => {
            latest.fetch_max(last, Ordering::Relaxed);
            None
        }
    })
}

fn clock_micros() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

/// Replaces the leader's value on a majority of masters, each checking
/// the owner and the term; [`Error::NotHeld`] once a majority refuses.
pub(crate) async fn proclaim(majority: &Majority, lease: &Lease, value: &str) -> Result<()> {
    let limit = majority.node_limit(lease.ttl());
    let answers = majority.on_every(limit, |n| n.proclaim(lease, value)).await;
    let done = answers.ok.iter().filter(|d| **d).count();
    if done >= majority.quorum() {
        return Ok(());
    }
    if answers.ok.len() - done > majority.nodes() - majority.quorum() {
        return Err(Error::not_held(lease.name()));
    }
    Err(majority.no_answer_quorum("proclaim", &answers, limit))
}

/// The leader a majority of masters agree on, owner and term, with the
/// value most of them hold (a proclaim that reached only some of them
/// leaves two) and the least time left among them.
pub(crate) async fn leader(majority: &Majority, name: &LockName) -> Result<Option<Leader>> {
    let agreed = majority
        .agreed_holder(name, LockKind::Leader, |a, b| {
            a.owner == b.owner && a.counter == b.counter
        })
        .await?;
    let Some(first) = agreed.first() else {
        return Ok(None);
    };
    let values: Vec<&str> = agreed
        .iter()
        .map(|h| h.value.as_deref().unwrap_or_default())
        .collect();
    let value = values
        .iter()
        .max_by_key(|v| values.iter().filter(|w| w == v).count())
        .copied()
        .unwrap_or_default();
    Ok(Some(Leader::new(
        &first.owner,
        value,
        FencingToken::new(first.counter),
        least_left(&agreed),
    )))
}

/// The least time left among the masters that agree.
pub(crate) fn least_left(agreed: &[NodeHolder]) -> Option<std::time::Duration> {
    agreed.iter().map(|h| h.remaining).min()
}
