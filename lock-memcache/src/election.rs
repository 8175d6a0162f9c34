//! Elections: the leader is the holder of a mutex on the election's own
//! keys (`…#elect`, fence `…#elect#fence`), granted, renewed and released
//! by the mutex's protocol; its item also holds the term and the value the
//! leader proclaims (`ballot.rs`).
//!
//! What is particular to the election is here: the term written into the
//! item once the grant has drawn it, the proclaim, and the reads of who
//! leads.

use std::time::Duration;

use lock_core::backend::{AcquireRequest, Holder, Leader, Lease};
use lock_core::{Error, FencingToken, LockKind, LockName, Result};
use tokio::time::Instant;

use crate::backend::{MemcacheBackend, exptime};
use crate::ballot::Ballot;
use crate::meta::Item;

impl MemcacheBackend {
    /// One attempt to lead `req.name`: the mutex's add on the election's
    /// key (or its grant taken again after a lost reply), then the term
    /// written into the item, on the CAS the grant left.
    ///
    /// The term is the counter's value drawn right behind the add, so the
    /// add cannot carry it; until it is written in, the item names no term
    /// and [`read_leader`](Self::read_leader) sees nobody leading, as the
    /// candidate does not know yet that it leads. The write sets the
    /// expiry afresh, from after the send the lease counts from.
    pub(crate) async fn try_lead(
        &self,
        req: &AcquireRequest,
        sent: Instant,
    ) -> Result<Option<Lease>> {
        let place = self.election(&req.name);
        let Some(lease) = self.add_at(req, &place, sent).await? else {
            return Ok(None);
        };
        let owner = req.owner.to_hex();
        let ballot = Ballot {
            owner: &owner,
            term: Some(lease.token().get()),
            value: &req.value,
        }
        .write();
        let exptime = exptime(req.ttl);
        let stamped = self
            .write_if_owner(
                &place.key,
                &owner,
                lease.version(),
                "compare-and-set",
                |cas, _| self.client.set_if(&place.key, &ballot, exptime, cas),
            )
            .await?;
        // Gone already (expired, evicted): nothing was granted.
        let Some(cas) = stamped else {
            return Ok(None);
        };
        self.observers.notify_all(&req.name);
        Ok(Some(lease.with_version(cas)))
    }

    /// Replaces the value `lease` proclaims, keeping its owner, term and
    /// expiry: written on the CAS of a read that found the item `lease`'s
    /// owner's, so never over another owner's item; `NotHeld` if it is not
    /// there or not ours.
    pub(crate) async fn proclaim_at(&self, lease: &Lease, value: &str) -> Result<()> {
        if lease.kind() != LockKind::Leader {
            return Err(Error::not_held(lease.name()));
        }
        let key = self.election(lease.name()).key;
        let owner = lease.owner().to_hex();
        let ballot = Ballot {
            owner: &owner,
            term: Some(lease.token().get()),
            value,
        }
        .write();
        let proclaimed = self
            .write_if_owner(&key, &owner, None, "proclaim", |cas, read| {
                self.client
                    .set_if(&key, &ballot, time_left(read, lease), cas)
            })
            .await?;
        if proclaimed.is_none() {
            return Err(Error::not_held(lease.name()));
        }
        self.observers.notify_all(lease.name());
        Ok(())
    }

    /// The leader of `name`: the election's item, once its term is in. The
    /// read leaves the item's place in memcached's LRU as it was, as a
    /// waiter's does: observers reading it often do not keep it cached.
    pub(crate) async fn read_leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let key = self.election(name).key;
        let item = self.client.peek_all(&[&key]).await?.pop().flatten();
        Ok(item.and_then(|item| {
            let ballot = Ballot::read(&item.value);
            Some(Leader::new(
                ballot.owner,
                ballot.value,
                FencingToken::new(ballot.term?),
                item.ttl.map(Duration::from_secs),
            ))
        }))
    }

    /// Waits `within` for the leader of `name` to differ from `seen`:
    /// memcached tells of nothing, so this polls, but a change made through
    /// this backend (a grant, a proclaim, a resign) wakes it at once. It
    /// listens before it reads the leader again: a change made here after
    /// the caller's read, before it listened, is found by that read.
    pub(crate) async fn leader_change(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        let wake = self.observers.subscribe(name);
        let notified = wake.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        let now = self.read_leader(name).await?;
        if !Leader::unchanged(seen, now.as_ref()) {
            return Ok(());
        }
        let _ = tokio::time::timeout(within, notified).await;
        Ok(())
    }

    /// The election's holder, listed from the moment its add applied (its
    /// item keeps everybody else out), without a token until the term is
    /// in.
    pub(crate) async fn election_holders(&self, name: &LockName) -> Result<Vec<Holder>> {
        let Some(item) = self.client.get(&self.election(name).key).await? else {
            return Ok(Vec::new());
        };
        let ballot = Ballot::read(&item.value);
        let left = item.ttl.map(Duration::from_secs);
        let holder = match ballot.term {
            Some(term) => Holder::new(ballot.owner, FencingToken::new(term), left),
            None => Holder::without_token(ballot.owner, left),
        };
        Ok(vec![holder.of_kind(LockKind::Leader)])
    }
}

/// The expiry that keeps the item's: the whole seconds it has left, as
/// read (memcached's `t`). Set on a clock that may have ticked since the
/// read, it can only end the item later, never before the lease. Never
/// `0`, which memcached reads as no expiry at all.
fn time_left(read: Option<&Item>, lease: &Lease) -> u64 {
    read.and_then(|item| item.ttl)
        .unwrap_or_else(|| exptime(lease.remaining()))
        .max(1)
}
