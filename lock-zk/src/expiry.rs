//! The leases this backend granted, and for each the task that deletes its
//! node when it is not renewed by its deadline: a holder that stops renewing
//! frees the lock after its TTL although its session lives on. Also where a
//! lease's node is (`node_of`), for a release or a check.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Lease};
use lock_core::{FencingToken, Result};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::held::Held;
use crate::layout::Queue;
use crate::node::Node;
use crate::session::{Core, lease_ttl};

impl Core {
    /// Records the grant of our `node` in `queue` and starts the task that
    /// deletes it if it is not renewed by `sent + lease TTL`.
    pub(crate) fn grant(
        self: &Arc<Self>,
        req: &AcquireRequest,
        client: &zk::Client,
        queue: &Queue,
        node: &Node,
        sent: Instant,
    ) -> Lease {
        let ttl = lease_ttl(req.ttl, client);
        let path = format!("{}/{}", queue.parent, node.name);
        let (until, deadline) = watch::channel(sent + ttl);
        let stop = CancellationToken::new();
        let held = Held {
            kind: req.kind,
            path,
            session: client.session_id().0,
            czxid: node.czxid,
            ttl,
            until,
            expired: false,
            stop: stop.clone(),
        };
        if let Some(old) = self.held().insert(req.owner.to_u128(), held) {
            old.stop.cancel();
        }
        tokio::spawn(expire_when_due(
            Arc::downgrade(self),
            req.owner.to_u128(),
            deadline,
            stop,
        ));
        Lease::granted(req, token(node.czxid), sent).renewed(ttl, sent)
    }

    /// The lease this backend already granted to `req`, if it still holds
    /// it: acquiring again with the same request is idempotent.
    pub(crate) fn granted_before(&self, req: &AcquireRequest) -> Option<Lease> {
        let session = self.live_client()?.session_id().0;
        let held = self.held();
        let h = held.get(&req.owner.to_u128())?;
        let until = *h.until.borrow();
        if h.expired || h.kind != req.kind || h.session != session || Instant::now() >= until {
            return None;
        }
        let sent = until - h.ttl;
        Some(Lease::granted(req, token(h.czxid), sent).renewed(h.ttl, sent))
    }

    /// The node path and session of `owner`'s lease with node `czxid`, while
    /// it is in force.
    pub(crate) fn in_force(&self, owner: u128, czxid: i64) -> Option<(String, i64)> {
        let held = self.held();
        held.get(&owner)
            .filter(|h| !h.expired && h.czxid == czxid && Instant::now() < *h.until.borrow())
            .map(|h| (h.path.clone(), h.session))
    }

    /// Moves the deadline of `owner`'s lease with node `czxid` to
    /// `sent + ttl`, confirmed by a request sent at `sent`; `false` if the
    /// lease is no longer kept, or either deadline has passed. Past its
    /// deadline a lease is over even before the expiry task has run.
    pub(crate) fn extend(&self, owner: u128, czxid: i64, ttl: Duration, sent: Instant) -> bool {
        let mut held = self.held();
        let now = Instant::now();
        match held.get_mut(&owner) {
            Some(h)
                if !h.expired
                    && h.czxid == czxid
                    && now < *h.until.borrow()
                    && now < sent + ttl =>
            {
                h.ttl = ttl;
                h.until.send_replace(sent + ttl);
                true
            }
            _ => false,
        }
    }

    /// What this backend keeps of `owner`'s lease with node `czxid`; `None`
    /// if it keeps no lease of `owner`, or another one.
    pub(crate) fn kept(&self, owner: u128, czxid: i64) -> Option<Kept> {
        self.held()
            .get(&owner)
            .filter(|h| h.czxid == czxid)
            .map(|h| match h.expired {
                true => Kept::Expired,
                false => Kept::Live {
                    path: h.path.clone(),
                    session: h.session,
                },
            })
    }

    /// Stops keeping `owner`'s lease.
    pub(crate) fn forget(&self, owner: u128) {
        if let Some(h) = self.held().remove(&owner) {
            h.stop.cancel();
        }
    }

    /// Stops keeping `owner`'s lease with node `czxid`, and no other.
    pub(crate) fn forget_lease(&self, owner: u128, czxid: i64) {
        let mut held = self.held();
        if held.get(&owner).is_some_and(|h| h.czxid == czxid)
            && let Some(h) = held.remove(&owner)
        {
            h.stop.cancel();
        }
    }
}

/// A lease this backend keeps.
pub(crate) enum Kept {
    /// Not renewed in time: its node is deleted, or being deleted.
    Expired,
    /// In force until its deadline: its node's path and session.
    Live { path: String, session: i64 },
}

/// The fencing token of a node: its czxid.
pub(crate) fn token(czxid: i64) -> FencingToken {
    FencingToken::from_i64(czxid)
}

/// The expiry task of one grant: sleeps until the grant's deadline (moved
/// by each renewal); if it passes, deletes the node so that a holder that
/// stopped renewing frees the lock after its TTL even though its session
/// lives on.
async fn expire_when_due(
    core: Weak<Core>,
    owner: u128,
    mut until: watch::Receiver<Instant>,
    stop: CancellationToken,
) {
    let (backend, path, session) = loop {
        let due = *until.borrow_and_update();
        tokio::select! {
            () = stop.cancelled() => return,
            () = sleep_until(due) => {}
            changed = until.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
        }
        let Some(strong) = core.upgrade() else {
            return;
        };
        // The sleep may have ended as a renewal moved the deadline: only
        // the deadline in force, read under the lock renewals take, decides.
        let mut held = strong.held();
        let Some(h) = held.get_mut(&owner).filter(|h| !h.stop.is_cancelled()) else {
            return;
        };
        if Instant::now() < *h.until.borrow() {
            continue;
        }
        h.expired = true;
        let (path, session) = (h.path.clone(), h.session);
        drop(held);
        break (strong, path, session);
    };
    tracing::debug!(node = %crate::layout::shown(&path), "lease not renewed in time; deleting its node");
    backend.keep_deleting(session, &path, &stop).await;
    if stop.is_cancelled() {
        return;
    }
    let mut held = backend.held();
    if held.get(&owner).is_some_and(|h| h.expired) {
        held.remove(&owner);
    }
}

impl Core {
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
    pub(crate) async fn node_of(
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
pub(crate) fn czxid_of(lease: &Lease) -> i64 {
    lease.token().to_i64()
}

#[cfg(test)]
mod tests {
    use lock_core::LockKind;

    use super::*;
    use crate::ZkConfig;

    /// A backend's core with one kept lease, and its expiry task running.
    fn keeping(ttl: Duration) -> (Arc<Core>, u128, i64) {
        let config = ZkConfig::from_url("zk://127.0.0.1:1").unwrap();
        let backend = Arc::new(Core::new(config, true));
        let (owner, czxid) = (7, 42);
        let (until, deadline) = watch::channel(Instant::now() + ttl);
        let stop = CancellationToken::new();
        let held = Held {
            kind: LockKind::Exclusive,
            path: "/locks/x/_c_0-lock-0000000000".into(),
            session: 1,
            czxid,
            ttl,
            until,
            expired: false,
            stop: stop.clone(),
        };
        backend.held().insert(owner, held);
        tokio::spawn(expire_when_due(
            Arc::downgrade(&backend),
            owner,
            deadline,
            stop,
        ));
        (backend, owner, czxid)
    }

    async fn let_tasks_run() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// Renewals whose replies land right at the old deadline, over and
    /// over: the timer that ends the lease has fired and the deadline moves
    /// at the same instant. Each such renewal is either refused (the lease
    /// is over, and its node goes) or honoured (the node stays): the expiry
    /// task never deletes the node of a lease the backend has just renewed.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_landing_at_the_deadline_is_refused_or_honoured() {
        let ttl = Duration::from_millis(300);
        let tick = Duration::from_millis(1);
        let (backend, owner, czxid) = keeping(ttl);
        let mut deadline = Instant::now() + ttl;
        // Renewals in time keep the lease.
        for round in 0..16 {
            tokio::time::advance(deadline - tick - Instant::now()).await;
            let sent = Instant::now();
            assert!(
                backend.extend(owner, czxid, ttl, sent),
                "round {round}: a renewal before the deadline"
            );
            deadline = sent + ttl;
            tokio::time::advance(tick).await;
            let_tasks_run().await;
            assert!(
                backend.in_force(owner, czxid).is_some(),
                "round {round}: the lease was renewed in time"
            );
        }
        for round in 0..64 {
            tokio::time::advance(deadline - Instant::now()).await;
            let sent = deadline - tick;
            let renewed = backend.extend(owner, czxid, ttl, sent);
            let_tasks_run().await;
            if !renewed {
                assert!(
                    backend.in_force(owner, czxid).is_none(),
                    "a lease whose renewal was refused is over"
                );
                return;
            }
            assert!(
                backend.in_force(owner, czxid).is_some(),
                "round {round}: the expiry task deleted the node of a lease it had just renewed"
            );
            deadline = sent + ttl;
        }
    }
}
