//! The leases this backend granted, and for each the task that deletes its
//! node when it is not renewed by its deadline: a holder that stops renewing
//! frees the lock after its TTL although its session lives on.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::wait::Backoff;
use lock_core::{AcquireRequest, FencingToken, Lease};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::cleanup::RETRY_CAP;
use crate::error::no_data_change;
use crate::recipe::{Node, parent_path};
use crate::session::{Inner, ZkBackend, connected, lease_ttl};

/// One lease this backend granted and keeps.
pub(crate) struct Held {
    path: String,
    session: i64,
    czxid: i64,
    /// The lease TTL last granted.
    ttl: Duration,
    /// When the node is deleted unless renewed.
    until: watch::Sender<Instant>,
    /// Set by the expiry task before it deletes the node.
    expired: bool,
    stop: CancellationToken,
}

impl ZkBackend {
    /// Records a grant and starts the task that deletes its node if it is
    /// not renewed by `sent + lease TTL`.
    pub(crate) fn grant(
        &self,
        req: &AcquireRequest,
        client: &zk::Client,
        node: &Node,
        sent: Instant,
    ) -> Lease {
        let ttl = lease_ttl(req.ttl, client);
        let path = format!("{}/{}", parent_path(&req.name), node.name);
        let (until, deadline) = watch::channel(sent + ttl);
        let stop = CancellationToken::new();
        let held = Held {
            path: path.clone(),
            session: client.session_id().0,
            czxid: node.czxid,
            ttl,
            until,
            expired: false,
            stop: stop.clone(),
        };
        if let Some(old) = self.inner.held().insert(req.owner.to_u128(), held) {
            old.stop.cancel();
        }
        tokio::spawn(expire_when_due(
            Arc::downgrade(&self.inner),
            req.owner.to_u128(),
            deadline,
            stop,
        ));
        Lease::new(req.name.clone(), req.owner, token(node.czxid), ttl, sent)
    }

    /// The lease this backend already granted to `req`, if it still holds
    /// it: acquiring again with the same request is idempotent.
    pub(crate) fn granted_before(&self, req: &AcquireRequest) -> Option<Lease> {
        let session = self.session_id()?;
        let held = self.inner.held();
        let h = held.get(&req.owner.to_u128())?;
        let until = *h.until.borrow();
        if h.expired || h.session != session || Instant::now() >= until {
            return None;
        }
        Some(Lease::new(
            req.name.clone(),
            req.owner,
            token(h.czxid),
            h.ttl,
            until - h.ttl,
        ))
    }

    /// The node path and session of `owner`'s lease with node `czxid`, while
    /// it is in force.
    pub(crate) fn in_force(&self, owner: u128, czxid: i64) -> Option<(String, i64)> {
        let held = self.inner.held();
        held.get(&owner)
            .filter(|h| !h.expired && h.czxid == czxid && Instant::now() < *h.until.borrow())
            .map(|h| (h.path.clone(), h.session))
    }

    /// Moves the deadline of `owner`'s lease with node `czxid` to
    /// `sent + ttl`, confirmed by a request sent at `sent`; `false` if the
    /// lease is no longer kept.
    pub(crate) fn extend(&self, owner: u128, czxid: i64, ttl: Duration, sent: Instant) -> bool {
        let mut held = self.inner.held();
        match held.get_mut(&owner) {
            Some(h) if !h.expired && h.czxid == czxid => {
                h.ttl = ttl;
                h.until.send_replace(sent + ttl);
                true
            }
            _ => false,
        }
    }

    /// The node path of `owner`'s kept lease, and whether it expired.
    pub(crate) fn kept(&self, owner: u128) -> Option<(String, bool)> {
        self.inner
            .held()
            .get(&owner)
            .map(|h| (h.path.clone(), h.expired))
    }

    /// Stops keeping `owner`'s lease.
    pub(crate) fn forget(&self, owner: u128) {
        if let Some(h) = self.inner.held().remove(&owner) {
            h.stop.cancel();
        }
    }
}

/// The fencing token of a node: its czxid.
pub(crate) fn token(czxid: i64) -> FencingToken {
    FencingToken(u64::try_from(czxid).unwrap_or(0))
}

/// The expiry task of one grant: sleeps until the grant's deadline (moved
/// by each renewal); if it passes, deletes the node so that a holder that
/// stopped renewing frees the lock after its TTL even though its session
/// lives on.
async fn expire_when_due(
    inner: Weak<Inner>,
    owner: u128,
    mut until: watch::Receiver<Instant>,
    stop: CancellationToken,
) {
    loop {
        let due = *until.borrow_and_update();
        tokio::select! {
            () = stop.cancelled() => return,
            () = sleep_until(due) => break,
            changed = until.changed() => if changed.is_err() { return },
        }
    }
    let Some(strong) = inner.upgrade() else {
        return;
    };
    let (path, session) = {
        let mut held = strong.held();
        match held.get_mut(&owner) {
            Some(h) if !h.stop.is_cancelled() => {
                h.expired = true;
                (h.path.clone(), h.session)
            }
            _ => return,
        }
    };
    let backend = ZkBackend { inner: strong };
    tracing::debug!(node = %path, "lease not renewed in time; deleting its node");
    let mut backoff = Backoff::with_cap(RETRY_CAP);
    loop {
        let Some(client) = backend.inner.live_client() else {
            break;
        };
        if client.session_id().0 != session {
            break; // that session ended, and the node with it
        }
        if connected(&client).is_ok() {
            match backend
                .call("delete an expired node", client.delete(&path, None))
                .await
            {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                    if let Some((parent, _)) = path.rsplit_once('/') {
                        backend.tidy_parent(&client, parent).await;
                    }
                    break;
                }
                Ok(Err(e)) if no_data_change(&e) && !matches!(e, zk::Error::Throttled) => {
                    tracing::warn!(error = %e, node = %path, "cannot delete an expired lock node");
                    break;
                }
                _ => {}
            }
        }
        if stop.is_cancelled() {
            return;
        }
        tokio::time::sleep(backoff.next_nap()).await;
    }
    let mut held = backend.inner.held();
    if held.get(&owner).is_some_and(|h| h.expired) {
        held.remove(&owner);
    }
}
