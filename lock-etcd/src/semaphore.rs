//! A semaphore's permits as one line of lease keys under
//! `{name}#sem/leases/`: each acquire puts one key on its session lease,
//! and a key holds a permit while it is among the `N` oldest by create
//! revision. Putting the key and reading the oldest keys is one `Txn`, so
//! a free permit costs that one round trip.
//!
//! At most `N` hold: a key's rank never grows (new keys are younger, old
//! ones only go), so a key among the `N` oldest at its grant stays there
//! while it lives, and no more than `N` keys are ever among the `N` oldest.
//!
//! A waiter watches one thing (`semaphore_wait.rs`): the first waiter (the
//! key just after the `N` oldest) the deletion of any of those `N`; a
//! waiter further back the key just before its own, which tells it when
//! that key is granted (see [`Permits::grant`]) or gone.

use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use lock_core::backend::AcquireRequest;
use lock_core::{Error, Result};

use crate::error::lease_not_found;
use crate::mark::Mark;
use crate::queue::{self, Queue, Requeue, unexpected};
use crate::session::{Session, still_ours};

/// Where our lease key stood at one read.
#[derive(Debug)]
pub(crate) struct Standing {
    /// Our key's create revision: the grant's fencing token.
    pub(crate) revision: i64,
    /// The store's revision at the read.
    pub(crate) read_at: i64,
    pub(crate) rank: Rank,
}

/// What our key's place among the lease keys means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rank {
    /// Among the `N` oldest: a permit. `signal`: a younger key was there,
    /// which may be waiting for word of this grant.
    Held { signal: bool },
    /// Just after the `N` oldest, which are these keys: a permit as soon as
    /// any of them goes.
    First(Vec<Vec<u8>>),
    /// Further back, behind this key.
    Behind(Vec<u8>),
}

/// One acquire's lease key in one semaphore, and the requests on it.
pub(crate) struct Permits<'a> {
    pub(crate) queue: &'a Queue,
    pub(crate) req: &'a AcquireRequest,
    pub(crate) key: String,
    pub(crate) leases: String,
    pub(crate) permits: u32,
}

impl<'a> Permits<'a> {
    pub(crate) fn new(queue: &'a Queue, req: &'a AcquireRequest, permits: u32) -> Self {
        Self {
            queue,
            req,
            key: queue.layout.held_key(&req.name, req.owner, req.kind),
            leases: queue.layout.leases_dir(&req.name),
            permits,
        }
    }

    /// The `N + 1` oldest lease keys (up to `newest`, if given), keys only:
    /// enough to tell whether ours is among the `N` oldest, and which keys
    /// a first waiter waits for.
    fn oldest(&self, newest: Option<i64>) -> GetOptions {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(i64::from(self.permits) + 1)
            .with_keys_only();
        match newest {
            Some(revision) => options.with_max_create_revision(revision),
            None => options,
        }
    }

    /// Puts our lease key on `session` unless it is there (a retry), and
    /// reads the oldest lease keys and the one just before ours in the same
    /// `Txn`. A key of ours on another session (an attempt before that
    /// session was replaced) is deleted: queue again on a current one.
    pub(crate) async fn put(
        &self,
        session: &Arc<Session>,
    ) -> Result<std::result::Result<Standing, Requeue>> {
        let owner = self.req.owner.to_hex();
        // Put in the same transaction, our key is the newest of all: the
        // newest key but ours is the one just before it.
        let newest = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2)
            .with_keys_only();
        let leases = self.leases.as_str();
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.as_str(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(
                    self.key.as_str(),
                    owner.as_str(),
                    Some(PutOptions::new().with_lease(session.id)),
                ),
                TxnOp::get(leases, Some(self.oldest(None))),
                TxnOp::get(leases, Some(newest)),
            ])
            .or_else([
                TxnOp::get(self.key.as_str(), None),
                TxnOp::get(leases, Some(self.oldest(None))),
            ]);
        let Some(response) = self.send("take a permit", txn, session).await? else {
            return Ok(Err(Requeue));
        };
        let ops = response.op_responses();
        let (Some(mine), Some(TxnOpResponse::Get(oldest))) = (ops.first(), ops.get(1)) else {
            return Err(unexpected());
        };
        let read_at = queue::revision(&response);
        match mine {
            TxnOpResponse::Put(_) => {
                let Some(TxnOpResponse::Get(newest)) = ops.get(2) else {
                    return Err(unexpected());
                };
                let before = newest
                    .kvs()
                    .iter()
                    .find(|kv| kv.create_revision() < read_at)
                    .map(|kv| kv.key().to_vec());
                // Nobody is behind a key that holds as it is put.
                let rank = self.rank(oldest, read_at, before, false)?;
                Ok(Ok(Standing {
                    revision: read_at,
                    read_at,
                    rank,
                }))
            }
            TxnOpResponse::Get(got) => {
                let Some(kv) = got.kvs().first() else {
                    return Err(unexpected());
                };
                if kv.value() != owner.as_bytes() {
                    return Err(Error::backend(format!(
                        "the lease key {} belongs to another owner",
                        crate::layout::shown(&self.key)
                    )));
                }
                if kv.lease() != session.id {
                    self.queue
                        .core
                        .leave(&self.key, &Mark::Owner(owner))
                        .await?;
                    return Ok(Err(Requeue));
                }
                let revision = kv.create_revision();
                // Found, not put: where it stands needs the read that
                // names the key before it, unless it holds.
                match self.rank(oldest, revision, None, true) {
                    Ok(rank @ (Rank::Held { .. } | Rank::First(_))) => Ok(Ok(Standing {
                        revision,
                        read_at,
                        rank,
                    })),
                    _ => self.read(revision, session).await.map(Ok),
                }
            }
            _ => Err(unexpected()),
        }
    }

    /// Reads where our key (created at `revision`) stands now, and checks
    /// that it is still there, on our session: the check Jepsen's etcd
    /// analysis asks of a waiter (see `look_ahead`).
    pub(crate) async fn read(&self, revision: i64, session: &Arc<Session>) -> Result<Standing> {
        let before_us = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let younger = GetOptions::new()
            .with_prefix()
            .with_min_create_revision(revision + 1)
            .with_limit(1)
            .with_keys_only();
        let leases = self.leases.as_str();
        let txn = Txn::new().and_then([
            TxnOp::get(self.key.as_str(), None),
            TxnOp::get(leases, Some(self.oldest(Some(revision)))),
            TxnOp::get(leases, Some(before_us)),
            TxnOp::get(leases, Some(younger)),
        ]);
        let Some(response) = self.send("count the permits", txn, session).await? else {
            return Err(lease_expired("count the permits"));
        };
        let ops = response.op_responses();
        let (
            Some(TxnOpResponse::Get(mine)),
            Some(TxnOpResponse::Get(oldest)),
            Some(TxnOpResponse::Get(before)),
            Some(TxnOpResponse::Get(younger)),
        ) = (ops.first(), ops.get(1), ops.get(2), ops.get(3))
        else {
            return Err(unexpected());
        };
        if !still_ours(mine, revision, session.id) {
            return Err(Error::not_held(&self.req.name));
        }
        let before = before.kvs().first().map(|kv| kv.key().to_vec());
        Ok(Standing {
            revision,
            read_at: queue::revision(&response),
            rank: self.rank(oldest, revision, before, !younger.kvs().is_empty())?,
        })
    }

    /// Our rank from the oldest keys (`N + 1` of them at most), the key
    /// just before ours, and whether any key is younger than ours.
    fn rank(
        &self,
        oldest: &GetResponse,
        revision: i64,
        before: Option<Vec<u8>>,
        younger: bool,
    ) -> Result<Rank> {
        let kvs = oldest.kvs();
        let n = self.permits as usize;
        let ours = |kv: &etcd_client::KeyValue| {
            kv.key() == self.key.as_bytes() && kv.create_revision() == revision
        };
        match kvs.iter().position(ours) {
            Some(at) if at < n => Ok(Rank::Held { signal: younger }),
            Some(at) if at == n => Ok(Rank::First(
                kvs[..n].iter().map(|kv| kv.key().to_vec()).collect(),
            )),
            _ => before.map(Rank::Behind).ok_or_else(unexpected),
        }
    }

    /// The grant of a waiter that found its key among the `N` oldest: one
    /// `Txn` that puts our key again, with its value and lease unchanged,
    /// if it is still there with its create revision, on our session (the
    /// Jepsen check). The put is the word a waiter behind us watches for:
    /// it is the first waiter now.
    pub(crate) async fn grant(&self, revision: i64, session: &Arc<Session>) -> Result<()> {
        let owner = self.req.owner.to_hex();
        let key = self.key.as_str();
        let txn = Txn::new()
            .when([
                Compare::create_revision(key, CompareOp::Equal, revision),
                Compare::lease(key, CompareOp::Equal, session.id),
            ])
            .and_then([TxnOp::put(
                key,
                owner.as_str(),
                Some(PutOptions::new().with_ignore_lease()),
            )]);
        match self.send("take the permit", txn, session).await? {
            Some(response) if response.succeeded() => Ok(()),
            Some(_) => Err(Error::not_held(&self.req.name)),
            None => Err(lease_expired("take the permit")),
        }
    }

    /// Sends `txn`, with a keep-alive if the session's proof is getting
    /// old. `None`: the session turned out gone, and our key with it.
    async fn send(
        &self,
        operation: &'static str,
        txn: Txn,
        session: &Arc<Session>,
    ) -> Result<Option<TxnResponse>> {
        let queue = self.queue;
        let keep_alive = queue.sessions.prove_if_stale(session);
        let sent = queue.core.call(operation, |mut c| async move {
            match c.txn(txn).await {
                Err(e) if lease_not_found(&e) => Ok(None),
                other => other.map(Some),
            }
        });
        let (alive, response) = tokio::join!(keep_alive, sent);
        let response = response?;
        if response.is_none() {
            session.kill();
        }
        Ok(response.filter(|_| !matches!(alive, Ok(false)) && !session.is_gone()))
    }
}

/// A session found gone while we waited: an outage, retried on a new one.
fn lease_expired(operation: &str) -> Error {
    Error::unavailable(
        crate::NAME,
        format!("{operation}: the session lease expired"),
    )
}
