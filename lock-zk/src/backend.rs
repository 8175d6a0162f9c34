//! [`LockBackend`] for [`ZkBackend`]: a grant is our node admitted by its
//! family's rule (first in the mutex's queue, no writer before a reader,
//! a lease among the first permits), fenced by its czxid (see the crate
//! docs).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    AcquireRequest, BackendStats, Backoff, Holder, Lease, LockBackend, Retry, WaitBudget,
    async_trait,
};
use lock_core::{Capabilities, Error, Family, LockKind, LockName, Result};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::cleanup::RETRY_CAP;
use crate::error::convert;
use crate::expiry::Kept;
use crate::handover;
use crate::layout::{Queue, Rule};
use crate::recipe::Node;
use crate::session::{Inner, connected, lease_ttl};

/// A lock backend on a ZooKeeper ensemble (see the crate docs).
///
/// One backend is one ZooKeeper session, shared by every lock it takes. Cheap
/// to clone; clones share the session.
#[derive(Clone)]
pub struct ZkBackend {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", &self.inner.config)
            .field("session", &self.session_id().map(|id| format!("{id:#x}")))
            .finish_non_exhaustive()
    }
}

/// The shortest TTL accepted: a lease is renewed every third of its TTL, one
/// confirmation through the leader each time.
pub const MIN_TTL: Duration = Duration::from_millis(100);

const CAPABILITIES: Capabilities = Capabilities::consensus_queue(crate::NAME, MIN_TTL)
    .with_semaphores(true)
    .with_read_write(true);

#[async_trait]
impl LockBackend for ZkBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// `wakeups`: watch events that woke a waiter: a deletion of the node
    /// it watched (one per release when waiters queue, since each waiter
    /// watches only the node in its way), or a change of a semaphore's
    /// leases seen by the one acquirer that counts them.
    fn stats(&self) -> BackendStats {
        BackendStats::default().with_wakeups(
            self.inner
                .wakeups
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        match self
            .acquire(
                req,
                &WaitBudget::new(lock_core::Wait::No, CancellationToken::new()),
            )
            .await
        {
            Ok(lease) => Ok(Some(lease)),
            Err(Error::Busy { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        if let Some(lease) = self.granted_before(req) {
            return Ok(lease);
        }
        if let LockKind::Permit { permits } = req.kind {
            return self.acquire_permit(req, permits, budget).await;
        }
        let queue = Queue::of_lease(&req.name, req.kind);
        let mut retry = Retry::new(crate::NAME, budget, Backoff::with_cap(RETRY_CAP));
        // Our node and the session it belongs to, once created.
        let mut queued: Option<(i64, Node)> = None;
        let outcome = loop {
            let attempt = async {
                let client = self.session_for(req, budget).await?;
                let look_first = retry.attempts() > 0;
                let (node, sent) = self
                    .take_turn(&client, &queue, req, &mut queued, look_first, budget)
                    .await?;
                Ok::<_, Error>((client, node, sent))
            };
            match attempt.await {
                Ok(granted) => break Ok(granted),
                // A lost connection, an election, an expired session: queue
                // again (idempotent: the same node if it survived) within
                // the budget.
                Err(e) => {
                    if let Err(e) = retry.after(e).await {
                        break Err(e);
                    }
                }
            }
        };
        match outcome {
            Ok((client, node, sent)) => Ok(self.grant(req, &client, &queue, &node, sent)),
            Err(e) => {
                self.give_up(req, &[(&queue, &queued)]).await;
                Err(e)
            }
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let owner = lease.owner().to_u128();
        let czxid = czxid_of(lease);
        let Some((path, session)) = self.in_force(owner, czxid) else {
            return Err(Error::not_held(lease.name()));
        };
        // Renewing never starts a new session: a lease lives and dies with
        // the session that took it.
        let client = match self.inner.live_client() {
            Some(c) if c.session_id().0 == session => c,
            _ => return Err(Error::not_held(lease.name())),
        };
        connected(&client)?;
        // The lease runs from before the leader confirmed it.
        let sent = Instant::now();
        let mine = match self.confirm(&client, &path, czxid).await? {
            Ok(mine) => mine,
            Err(zk::Error::SessionExpired) => false,
            Err(e) => return Err(convert("renew", e)),
        };
        let ttl = lease_ttl(ttl, &client);
        if mine && self.extend(owner, czxid, ttl, sent) {
            Ok(lease.renewed(ttl, sent))
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let owner = lease.owner().to_u128();
        let czxid = czxid_of(lease);
        let forget = || self.forget_lease(owner, czxid);
        let kept = self.kept(owner, czxid);
        if let Some(Kept::Expired) = kept {
            return Err(Error::not_held(lease.name()));
        }
        let client = self.client().await?;
        connected(&client)?;
        let queue = Queue::of_lease(lease.name(), lease.kind());
        let Some((path, _)) = self.node_of(&client, &queue, lease, kept).await? else {
            forget();
            return Err(Error::not_held(lease.name()));
        };
        // Any version: nothing writes a lock node's data, so a version
        // would tell nothing more, and a node written by someone else must
        // still go. Only a holder that was first of all hands over: a
        // reader may release while other readers before it still hold.
        let delete = async {
            match queue.rule {
                Rule::First => {
                    handover::delete_and_hand_over(&self.inner.handovers, &client, &path).await
                }
                _ => client.delete(&path, None).await,
            }
        };
        match self.call("release", delete).await? {
            Ok(()) => {
                forget();
                if let Some((parent, _)) = path.rsplit_once('/') {
                    self.tidy_parent(&client, parent).await;
                }
                Ok(())
            }
            Err(zk::Error::NoNode) => {
                forget();
                Err(Error::not_held(lease.name()))
            }
            Err(e) => Err(convert("release", e)),
        }
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let czxid = czxid_of(lease);
        let kept = self.kept(lease.owner().to_u128(), czxid);
        if let Some(Kept::Expired) = kept {
            return Ok(false);
        }
        let client = self.client().await?;
        connected(&client)?;
        let queue = Queue::of_lease(lease.name(), lease.kind());
        match self.node_of(&client, &queue, lease, kept).await? {
            None => Ok(false),
            // Found by a listing after a `sync`: it is there, whatever
            // session holds it, and a granted node that is still there
            // stays granted (nodes made since come after it; a lease is
            // never taken back).
            Some((_, false)) => Ok(true),
            // Ours on this session: confirmed by a write the leader commits.
            Some((path, true)) => match self.confirm(&client, &path, czxid).await? {
                Ok(mine) => Ok(mine),
                Err(zk::Error::SessionExpired) => Ok(false),
                Err(e) => Err(convert("check our node", e)),
            },
        }
    }

    /// Forgets `req`'s lease and deletes every node of its owner in the
    /// family: the mutex node, a semaphore's lease and mutex nodes, a
    /// read-write lock's node.
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.forget(req.owner.to_u128());
        self.leave(&req.name, req.kind.family(), req.owner).await
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        if kind.family() != Family::Mutex {
            return self.group_holders(name, kind).await;
        }
        Ok(self.mutex_holder(name).await?.into_iter().collect())
    }
}

impl ZkBackend {
    /// The live session, or a new one; making one is bounded by the
    /// connect timeout, but a bounded wait must not outlast its budget for
    /// it.
    pub(crate) async fn session_for(
        &self,
        req: &AcquireRequest,
        budget: &WaitBudget,
    ) -> Result<zk::Client> {
        let client = match self.inner.live_client() {
            Some(c) => c,
            None if budget.is_over() => self.client().await?,
            None => match budget.race(self.client()).await {
                Some(c) => c?,
                None => return Err(budget.exhausted(&req.name)),
            },
        };
        connected(&client)?;
        Ok(client)
    }

    /// The path of `lease`'s node in `queue`, and whether it is this backend's own
    /// grant on its live session; `None` if the node is gone.
    ///
    /// Our own grant is not read first: its path names the owner (a
    /// digest of its token) and a sequence number unique under the parent, so whatever
    /// node is there is this owner's; and while the lease is kept, not
    /// expired, on this live session, the node there is the lease's own:
    /// nothing else deletes it but the expiry task (which marks the lease
    /// expired first) or this owner's own acquire or release. A lease this
    /// backend did not grant, or granted on a session that has ended since,
    /// is found by owner and czxid, whatever session holds it.
    async fn node_of(
        &self,
        client: &zk::Client,
        queue: &Queue,
        lease: &Lease,
        kept: Option<Kept>,
    ) -> Result<Option<(String, bool)>> {
        if let Some(Kept::Live { path, session }) = kept
            && session == client.session_id().0
        {
            return Ok(Some((path, true)));
        }
        let parent = &queue.parent;
        // The lease may have been granted through another member moments
        // ago; ours may not have seen its node yet.
        self.catch_up(client, parent).await;
        let children = self.children(client, parent).await?.unwrap_or_default();
        let czxid = czxid_of(lease);
        Ok(self
            .nodes_of(client, queue, lease.owner(), &children)
            .await?
            .into_iter()
            .find(|(_, stat)| stat.czxid == czxid)
            .map(|(name, _)| (format!("{parent}/{name}"), false)))
    }
}

/// The czxid a lease's fencing token stands for.
fn czxid_of(lease: &Lease) -> i64 {
    lease.token().to_i64()
}
