//! What an election keeps beyond its mutex (`node/ops.rs` grants, renews
//! and releases it as one, under its own keys): the leader's value and
//! its proclaims, reading the leader, Redlock's grant of a proposed term,
//! and waiting for the leader to change.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Leader, Lease, millis};
use lock_core::{FencingToken, LockKind, LockName, Result};

use crate::keys::Notice;
use crate::node::Node;
use crate::notices::{Sharded, Wakers};
use crate::scripts::{ELECT_SCRIPT, PROCLAIM_SCRIPT};

/// What one master answered to Redlock's grant of an election
/// ([`Node::elect`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elected {
    /// Granted, with the term proposed.
    Granted(FencingToken),
    /// Another candidate leads.
    Held,
    /// Nobody else leads, but the master granted this term, a later one
    /// before: propose above it.
    Behind(u64),
}

impl Node {
    /// Replaces the value that `lease`'s leader proclaims, keeping the
    /// lock's time left, if the election is still `lease`'s with its
    /// token; tells the observers. `true` if replaced.
    pub async fn proclaim(&self, lease: &Lease, value: &str) -> Result<bool> {
        let keys = self.keys().mutex(lease.name(), LockKind::Leader);
        let mut invocation = PROCLAIM_SCRIPT.prepare_invoke();
        invocation
            .key(keys.lock)
            .key(keys.fence)
            .key(keys.value.unwrap_or_default())
            .arg(lease.owner().to_hex())
            .arg(lease.token().get())
            .arg(value);
        if self.keys().announces() {
            let (channel, publish) = self.keys().release_channel(lease.name());
            invocation
                .arg(channel)
                .arg(publish)
                .arg(Notice::Elected.payload(lease.name()));
        }
        let done: i64 = self.run(invocation, "proclaim").await?;
        Ok(done == 1)
    }

    /// Redlock's grant of the election `req` on this master, with `term`
    /// (every master of the majority must store the same one, so the
    /// client proposes it): refused while another candidate leads, or
    /// while the master's latest term is not below it.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub async fn elect(&self, req: &AcquireRequest, term: u64) -> Result<Elected> {
        let keys = self.keys().mutex(&req.name, LockKind::Leader);
        let mut invocation = ELECT_SCRIPT.prepare_invoke();
        invocation
            .key(keys.lock)
            .key(keys.fence)
            .key(keys.value.unwrap_or_default())
            .arg(req.owner.to_hex())
            .arg(millis(req.ttl))
            .arg(&req.value)
            .arg(term);
        let answer: i64 = self.run(invocation, "acquire").await?;
        Ok(match answer {
            0 => Elected::Held,
            t if t < 0 => Elected::Behind(t.unsigned_abs()),
            t => Elected::Granted(FencingToken::new(t.unsigned_abs())),
        })
    }

    /// The leader of the election `name` on this server, if anybody leads.
    pub async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let holder = self.holder(name, LockKind::Leader).await?;
        Ok(holder.map(|h| {
            Leader::new(
                &h.owner,
                h.value.unwrap_or_default(),
                FencingToken::new(h.counter),
                Some(h.remaining),
            )
        }))
    }
}

/// How long an observer that saw `seen` waits at most: `within`, and no
/// longer than `seen`'s lease, which announces nothing when it runs out.
pub fn observation(seen: Option<&Leader>, within: Duration) -> Duration {
    seen.and_then(|l| l.expires_in)
        .map_or(within, |left| within.min(left + Duration::from_millis(1)))
}

/// Waits until `node`'s election `name` may have a leader other than
/// `seen`, or `within` has passed: listens for the election's notices
/// (subscribing to its shard channel in a cluster), then reads the
/// leader again, since a change between the caller's read and the
/// listening announced itself to nobody.
pub(crate) async fn leader_changed(
    node: &Node,
    wakers: &Wakers,
    sharded: Option<&Arc<Sharded>>,
    name: &LockName,
    seen: Option<&Leader>,
    within: Duration,
) -> Result<()> {
    let until = tokio::time::Instant::now() + observation(seen, within);
    let observers = wakers.observers.subscribe(name);
    let notified = observers.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    let _watching = match sharded {
        Some(sharded) => Some(sharded.observe(name, within).await),
        None => None,
    };
    if !Leader::unchanged(seen, node.leader(name).await?.as_ref()) {
        return Ok(());
    }
    let _ = tokio::time::timeout_at(until, notified).await;
    Ok(())
}
