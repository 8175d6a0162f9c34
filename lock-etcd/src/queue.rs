//! etcd's own lock protocol (the one behind `etcdctl lock` and the Go
//! client's `concurrency.Mutex`): a key per contender under the lock's
//! prefix, each attached to a lease; the lowest create revision holds, every
//! other watches the key just before its own.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LeaseGrantOptions, PutOptions, SortOrder, SortTarget,
    Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use lock_core::backend::{AcquireRequest, Lease, WaitBudget};
use lock_core::{Error, FencingToken, LockName, OwnerToken, Result};
use tokio::time::Instant;

use crate::backend::EtcdBackend;
use crate::error::{convert, lease_exists, lease_not_found};

/// Where one contender stands in a lock's queue.
pub(crate) struct Place {
    pub(crate) key: String,
    pub(crate) lease: i64,
    pub(crate) revision: i64,
    pub(crate) holder_revision: i64,
    /// This call granted the lease and put the key: the lease's TTL runs
    /// from the grant, sent just before, so a grant needs no keep-alive.
    /// False when an earlier attempt had already granted either.
    pub(crate) fresh: bool,
}

impl EtcdBackend {
    /// Runs one request within the timeout.
    pub(crate) async fn call<T, F, Fut>(&self, operation: &'static str, request: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        tokio::time::timeout(self.config.timeout, request(self.client.clone()))
            .await
            .map_err(|_| Error::timeout(operation, self.config.timeout))?
            .map_err(|e| convert(operation, e))
    }

    /// The key range of one lock: `{prefix}{name}/`, as etcd's Mutex uses.
    pub(crate) fn dir(&self, name: &LockName) -> String {
        format!("{}{name}/", self.config.prefix)
    }

    pub(crate) fn key(&self, name: &LockName, lease: i64) -> String {
        format!("{}{lease:x}", self.dir(name))
    }

    /// Joins the queue of `req.name`: a lease, and a key under it whose
    /// create revision orders us among the contenders. Idempotent for the
    /// owner: the lease ID and so the key are derived from the owner token.
    pub(crate) async fn enqueue(&self, req: &AcquireRequest) -> Result<Place> {
        let lease = lease_id(req.owner);
        let seconds = i64::try_from(req.ttl.as_secs() + u64::from(req.ttl.subsec_nanos() > 0))
            .unwrap_or(i64::MAX);
        let granted = self
            .call("grant a lease", |mut c| async move {
                match c
                    .lease_grant(seconds, Some(LeaseGrantOptions::new().with_id(lease)))
                    .await
                {
                    Err(e) if lease_exists(&e) => Ok(false), // our own earlier attempt
                    other => other.map(|_| true),
                }
            })
            .await?;
        let key = self.key(&req.name, lease);
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    req.owner.to_hex(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::get(self.dir(&req.name), Some(first.clone())),
            ])
            .or_else([
                TxnOp::get(key.clone(), None),
                TxnOp::get(self.dir(&req.name), Some(first)),
            ]);
        let response = self
            .call("enqueue", |mut c| async move { c.txn(txn).await })
            .await?;
        let put = response.succeeded();
        let ops = response.op_responses();
        let revision = match ops.first() {
            Some(TxnOpResponse::Put(put)) => put.header().map(|h| h.revision()),
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        };
        let holder_revision = match ops.get(1) {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        };
        match (revision, holder_revision) {
            (Some(revision), Some(holder_revision)) => Ok(Place {
                key,
                lease,
                revision,
                holder_revision,
                fresh: granted && put,
            }),
            _ => Err(Error::backend(
                "etcd answered the enqueue transaction without the expected keys",
            )),
        }
    }

    /// Leaves the queue: revoking the lease deletes the key with it.
    pub(crate) async fn dequeue(&self, lease: i64) -> Result<()> {
        self.call("revoke a lease", |mut c| async move {
            match c.lease_revoke(lease).await {
                Err(e) if lease_not_found(&e) => Ok(()),
                other => other.map(|_| ()),
            }
        })
        .await
    }

    /// Waits until every key created before ours is gone, watching only the
    /// one just before ours each time, then checks that our own key (and so
    /// our lease) survived the wait.
    pub(crate) async fn wait_for_turn(
        &self,
        name: &LockName,
        place: &Place,
        budget: &WaitBudget,
    ) -> Result<()> {
        loop {
            let before_us = GetOptions::new()
                .with_prefix()
                .with_max_create_revision(place.revision - 1)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1)
                .with_keys_only();
            let dir = self.dir(name);
            let found = self
                .call("find the predecessor", |mut c| async move {
                    c.get(dir, Some(before_us)).await
                })
                .await?;
            let Some(predecessor) = found.kvs().first().map(|kv| kv.key().to_vec()) else {
                break;
            };
            let since = found.header().map_or(0, |h| h.revision()) + 1;
            let options = WatchOptions::new().with_start_revision(since);
            let mut watch = self
                .call("watch the predecessor", |mut c| async move {
                    c.watch(predecessor, Some(options)).await
                })
                .await?;
            let deleted = async {
                while let Some(message) = watch.message().await.map_err(|e| convert("watch", e))? {
                    if message
                        .events()
                        .iter()
                        .any(|e| e.event_type() == etcd_client::EventType::Delete)
                    {
                        return Ok(());
                    }
                    if message.canceled() {
                        return Err(Error::Unavailable {
                            backend: crate::NAME,
                            message: format!(
                                "the watch was cancelled: {}",
                                message.cancel_reason()
                            ),
                            source: None,
                        });
                    }
                }
                Err(Error::Unavailable {
                    backend: crate::NAME,
                    message: "the watch stream ended".into(),
                    source: None,
                })
            };
            match budget.race(deleted).await {
                None => return Err(budget.exhausted(name)),
                Some(Err(e)) if e.is_retryable() && !budget.is_over() => {
                    tracing::debug!(error = %e, "watch failed; looking for the predecessor again");
                }
                Some(outcome) => {
                    outcome?;
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // Jepsen found etcd 3.4.3's lock granting waiters whose lease had
        // expired while they waited: make sure ours is still there.
        let key = place.key.clone();
        let mine = self
            .call(
                "check our key",
                |mut c| async move { c.get(key, None).await },
            )
            .await?;
        match mine.kvs().first() {
            Some(kv) if kv.create_revision() == place.revision => Ok(()),
            _ => Err(Error::not_held(name)),
        }
    }

    /// Keeps `lease` alive while its owner waits in the queue.
    pub(crate) fn keep_queued(&self, lease: i64, ttl: Duration) -> tokio::task::JoinHandle<()> {
        let backend = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                if let Err(e) = backend.keep_alive(lease).await {
                    tracing::debug!(error = %e, "keeping a queued lease alive failed");
                }
            }
        })
    }

    /// One keep-alive, one round trip: whether the lease is still alive.
    /// etcd-client sends the first keep-alive as it opens the stream and
    /// waits for its answer, failing unless the TTL in it is above 0.
    pub(crate) async fn keep_alive(&self, lease: i64) -> Result<bool> {
        self.call("keep the lease alive", |mut c| async move {
            match c.lease_keep_alive(lease).await {
                Ok(_) => Ok(true),
                // The client's answer to a first reply without TTL: an
                // expired or revoked lease, not an outage. (Its only other
                // error of that kind, a send on the channel it has just
                // opened, cannot happen.)
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    pub(crate) fn lease_for(&self, req: &AcquireRequest, place: &Place, sent: Instant) -> Lease {
        let token = FencingToken::from_i64(place.revision);
        Lease::new(req.name.clone(), req.owner, token, req.ttl, sent)
    }
}

/// The lease ID for an owner: 63 bits of its token, never 0 (which asks the
/// server to choose).
pub(crate) fn lease_id(owner: OwnerToken) -> i64 {
    let bits = (owner.to_u128() as u64) >> 1;
    i64::try_from(bits).unwrap_or(i64::MAX).max(1)
}
