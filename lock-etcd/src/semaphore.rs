//! A semaphore's permits, in the shape of Curator's
//! `InterProcessSemaphoreV2`. Contenders queue for the semaphore's internal
//! lock (the line of `queue.rs` under `{name}#sem/locks/`, one waiter
//! watching one key); the holder of that lock puts its lease key under
//! `{name}#sem/leases/` and holds a permit while its lease key is among the
//! `N` oldest there. If it is not, it waits, still holding the internal
//! lock, on a watch of the lease keys for a deletion, and reads again. Once
//! granted (or given up) it passes the internal lock on, which wakes the
//! next contender in line. A release deletes a lease key, which wakes the
//! holder of the internal lock and nobody else.
//!
//! At most `N` hold, whatever the internal lock does: a lease key's rank by
//! create revision never grows (new keys are younger, old ones only go),
//! so every holder's key is among the `N` oldest for as long as it holds.
//! The internal lock makes the grants come in the order of the lease keys
//! (tokens grow with them), and lets one contender at a time watch the
//! lease keys, so that a release wakes one waiter instead of all.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchOptions,
};
use lock_core::backend::{AcquireRequest, Lease, WaitBudget};
use lock_core::{Error, Result};

use crate::error::lease_not_found;
use crate::mark::Mark;
use crate::queue::{self, Queue, deleted, unexpected};
use crate::session::{Session, still_ours};

/// What a read of the lease keys found.
struct Count {
    /// Our lease key's create revision: the grant's fencing token.
    revision: i64,
    /// The store's revision at the read.
    read_at: i64,
    /// Whether our key is among the `N` oldest.
    granted: bool,
}

impl Queue {
    /// Takes a permit of `permits` for `req`, whose key holds the
    /// semaphore's internal lock on `session`: puts our lease key (unless
    /// an earlier attempt did) and, while `N` older lease keys are there,
    /// waits within `budget` for one to go. Without a budget (a try), a
    /// full semaphore is `None`.
    pub(crate) async fn take_permit(
        &self,
        req: &AcquireRequest,
        permits: u32,
        session: &Arc<Session>,
        budget: Option<&WaitBudget>,
    ) -> Result<Option<Lease>> {
        let key = self.layout.held_key(&req.name, req.owner, req.kind);
        let leases = self.layout.leases_dir(&req.name);
        let reader = Reader {
            queue: self,
            req,
            key: &key,
            leases: &leases,
            permits,
            session,
        };
        let mut count = reader.put().await?;
        'watch: while !count.granted {
            let Some(budget) = budget else {
                return Ok(None);
            };
            if budget.is_over() {
                return Err(budget.exhausted(&req.name));
            }
            budget.waiting();
            // From the present, as the queue's watches (see
            // `wait_for_turn`), and a read again if the store moved on.
            let (mut stream, created_at) = self
                .core
                .watch_from_now(
                    "watch the permits",
                    leases.clone().into_bytes(),
                    Some(WatchOptions::new().with_prefix()),
                )
                .await?;
            if created_at != count.read_at {
                count = reader.count(count.revision).await?;
            }
            while !count.granted {
                match budget.race(deleted(&mut stream, count.read_at)).await {
                    None => return Err(budget.exhausted(&req.name)),
                    Some(Err(e)) if e.is_retryable() && !budget.is_over() => {
                        tracing::debug!(error = %e, "watch of the lease keys failed; watching again");
                        continue 'watch;
                    }
                    Some(outcome) => {
                        outcome?;
                        self.wakeups.fetch_add(1, Ordering::Relaxed);
                        budget.attempted();
                        count = reader.count(count.revision).await?;
                    }
                }
            }
        }
        Ok(Some(self.lease_for(req, &key, count.revision, session)))
    }
}

/// The reads of one contender's lease key and the oldest lease keys.
struct Reader<'a> {
    queue: &'a Queue,
    req: &'a AcquireRequest,
    key: &'a str,
    leases: &'a str,
    permits: u32,
    session: &'a Arc<Session>,
}

impl Reader<'_> {
    /// The `N` oldest lease keys, keys only: one more would not change
    /// whether ours is among them.
    fn oldest(&self) -> GetOptions {
        GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(i64::from(self.permits))
            .with_keys_only()
    }

    /// Puts our lease key on the session unless it is there (a retry), and
    /// reads the oldest lease keys in the same `Txn`. A key of ours left on
    /// another session (an attempt before the session was replaced) is
    /// deleted and put again, on this one.
    async fn put(&self) -> Result<Count> {
        let owner = self.req.owner.to_hex();
        for _ in 0..2 {
            let txn = Txn::new()
                .when([Compare::create_revision(self.key, CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(
                        self.key,
                        owner.as_str(),
                        Some(PutOptions::new().with_lease(self.session.id)),
                    ),
                    TxnOp::get(self.leases, Some(self.oldest())),
                ])
                .or_else([
                    TxnOp::get(self.key, None),
                    TxnOp::get(self.leases, Some(self.oldest())),
                ]);
            let response = self.send("take a permit", txn).await?;
            let ops = response.op_responses();
            let (Some(mine), Some(TxnOpResponse::Get(oldest))) = (ops.first(), ops.get(1)) else {
                return Err(unexpected());
            };
            let revision = match mine {
                TxnOpResponse::Put(put) => put.header().map_or(0, |h| h.revision()),
                TxnOpResponse::Get(got) => {
                    let Some(kv) = got.kvs().first() else {
                        return Err(unexpected());
                    };
                    if kv.value() != owner.as_bytes() {
                        return Err(Error::backend(format!(
                            "the lease key {} belongs to another owner",
                            self.key
                        )));
                    }
                    if kv.lease() != self.session.id {
                        self.queue
                            .core
                            .leave(self.key, &Mark::Owner(owner.clone()))
                            .await?;
                        continue;
                    }
                    kv.create_revision()
                }
                _ => return Err(unexpected()),
            };
            return Ok(self.counted(&response, oldest, revision));
        }
        Err(Error::backend(format!(
            "the lease key {} came back on another session",
            self.key
        )))
    }

    /// Reads our lease key and the oldest lease keys again. Our key must
    /// still be there, on our session: the check Jepsen's etcd analysis
    /// asks of a waiter (see `look_ahead`).
    async fn count(&self, revision: i64) -> Result<Count> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.key, None),
            TxnOp::get(self.leases, Some(self.oldest())),
        ]);
        let response = self.send("count the permits", txn).await?;
        let ops = response.op_responses();
        let (Some(TxnOpResponse::Get(mine)), Some(TxnOpResponse::Get(oldest))) =
            (ops.first(), ops.get(1))
        else {
            return Err(unexpected());
        };
        if !still_ours(mine, revision, self.session.id) {
            return Err(Error::not_held(&self.req.name));
        }
        Ok(self.counted(&response, oldest, revision))
    }

    fn counted(&self, response: &TxnResponse, oldest: &GetResponse, revision: i64) -> Count {
        Count {
            revision,
            read_at: queue::revision(response),
            granted: oldest
                .kvs()
                .iter()
                .any(|kv| kv.key() == self.key.as_bytes() && kv.create_revision() == revision),
        }
    }

    /// Sends `txn`, with a keep-alive if the session's proof is getting
    /// old. A session found gone took the internal lock's key with it: an
    /// outage to retry on a new session.
    async fn send(&self, operation: &'static str, txn: Txn) -> Result<TxnResponse> {
        let queue = self.queue;
        let keep_alive = queue.sessions.prove_if_stale(self.session);
        let sent = queue.core.call(operation, |mut c| async move {
            match c.txn(txn).await {
                Err(e) if lease_not_found(&e) => Ok(None),
                other => other.map(Some),
            }
        });
        let (alive, response) = tokio::join!(keep_alive, sent);
        let response = response?;
        if response.is_none() {
            self.session.kill();
        }
        match response {
            Some(response) if !matches!(alive, Ok(false)) && !self.session.is_gone() => {
                Ok(response)
            }
            _ => Err(Error::unavailable(
                crate::NAME,
                format!("{operation}: the session lease expired"),
            )),
        }
    }
}
