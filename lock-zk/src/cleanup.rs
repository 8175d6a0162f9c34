//! Giving up a place in a lock's queue: deleting our nodes when a wait ends
//! without a grant (now, or in the background while the session lives;
//! every node of an owner whose create may have been applied unseen), and
//! deleting lock parents a release left empty where the server does not.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Backoff};
use lock_core::backend::{Family, OwnerToken};
use lock_core::{LockName, Result};
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::error::{convert, no_data_change};
use crate::layout::{Queue, is_root, owner_prefix};
use crate::node::Node;
use crate::session::{Core, connected};

/// Longest pause between retries of a failed wait or cleanup.
pub(crate) const RETRY_CAP: Duration = Duration::from_millis(500);

impl Core {
    /// Deletes every node `owner` has in `family`'s parents of `name`; `Ok`
    /// when none is left.
    async fn remove_nodes(
        &self,
        client: &zk::Client,
        name: &LockName,
        family: Family,
        owner: OwnerToken,
    ) -> Result<()> {
        let prefix = owner_prefix(owner);
        // A semaphore's lease goes before its mutex: the next acquirer then
        // counts the leases without ours.
        for queue in Queue::all_of(name, family).iter().rev() {
            let parent = &queue.parent;
            let Some(children) = self.children(client, parent).await? else {
                continue;
            };
            for child in children.iter().filter(|c| c.starts_with(&prefix)) {
                match self
                    .call(
                        "delete our node",
                        client.delete(&format!("{parent}/{child}"), None),
                    )
                    .await?
                {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(convert("delete our node", e)),
                }
            }
            self.tidy_parent(client, parent).await;
        }
        Ok(())
    }

    /// Deletes an empty lock parent where the server does not do it, and
    /// the parents above it that this leaves empty, up to the family's root.
    pub(crate) async fn tidy_parent(&self, client: &zk::Client, parent: &str) {
        if self.containers.load(Ordering::Relaxed) {
            return;
        }
        let mut parent = parent;
        while !is_root(parent) {
            match self
                .call("delete the lock parent", client.delete(parent, None))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(zk::Error::NotEmpty | zk::Error::NoNode)) => return,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, parent, "could not delete an empty lock parent");
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, parent, "could not delete an empty lock parent");
                    return;
                }
            }
            parent = parent.rsplit_once('/').map_or("", |(above, _)| above);
        }
    }

    /// Deletes our queued node in `queue` by its path, if its session is
    /// still the live one; `false` if that could not be done.
    pub(crate) async fn delete_queued(&self, session: i64, queue: &Queue, node: &Node) -> bool {
        let Some(client) = self.live_client() else {
            return true; // the session is gone, and its nodes with it
        };
        if client.session_id().0 != session {
            return true;
        }
        if connected(&client).is_err() {
            return false;
        }
        let path = format!("{}/{}", queue.parent, node.name);
        match self
            .call("leave the queue", client.delete(&path, None))
            .await
        {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                self.tidy_parent(&client, &queue.parent).await;
                true
            }
            _ => false,
        }
    }

    /// After an acquire of `req` gave up: deletes the nodes it queued
    /// (`queued`, each with its queue and session) by their paths, or, if
    /// that fails or a create may have been applied unseen, every node of
    /// the owner in the family.
    pub(crate) async fn give_up(
        self: &Arc<Self>,
        req: &AcquireRequest,
        queued: &[(&Queue, &Option<(i64, Node)>)],
    ) {
        let uncertain = self.is_uncertain(req.owner);
        let mut removed = !uncertain;
        let mut any = uncertain;
        for (queue, slot) in queued {
            if let Some((session, node)) = slot {
                any = true;
                if !uncertain && !self.delete_queued(*session, queue, node).await {
                    removed = false;
                }
            }
        }
        if any && !removed {
            let _ = self.leave(&req.name, req.kind.family(), req.owner).await;
        }
    }

    /// Removes `owner`'s nodes in `family`'s parents of `name` now, or keeps
    /// trying in the background for as long as the session that owns them
    /// lives.
    pub(crate) async fn leave(
        self: &Arc<Self>,
        name: &LockName,
        family: Family,
        owner: OwnerToken,
    ) -> Result<()> {
        let Some(client) = self.live_client() else {
            // The session is gone, and its ephemeral nodes with it.
            return Ok(());
        };
        let outcome = match connected(&client) {
            Ok(()) => self.remove_nodes(&client, name, family, owner).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                self.set_uncertain(owner, false);
                Ok(())
            }
            Err(e) if !e.is_retryable() => Err(e),
            Err(e) => {
                tracing::debug!(error = %e, lock = %name, "could not remove our node; retrying in the background");
                let backend = self.clone();
                let name = name.clone();
                tokio::spawn(
                    async move { backend.keep_removing(client, name, family, owner).await },
                );
                Err(e)
            }
        }
    }

    /// Retries [`Self::remove_nodes`] while `client`'s session lives.
    async fn keep_removing(
        &self,
        client: zk::Client,
        name: LockName,
        family: Family,
        owner: OwnerToken,
    ) {
        let mut backoff = Backoff::with_cap(RETRY_CAP);
        loop {
            if client.state().is_terminated() {
                return;
            }
            if connected(&client).is_ok() {
                match self.remove_nodes(&client, &name, family, owner).await {
                    Ok(()) => {
                        self.set_uncertain(owner, false);
                        return;
                    }
                    Err(e) if !e.is_retryable() => {
                        tracing::warn!(error = %e, lock = %name, "cannot remove a queued lock node");
                        return;
                    }
                    Err(_) => {}
                }
            }
            tokio::time::sleep(backoff.next_nap()).await;
        }
    }

    /// Deletes the node at `path`, made by `session`, retrying until it is
    /// gone, the session has ended (and the node with it), or `stop`.
    pub(crate) async fn keep_deleting(&self, session: i64, path: &str, stop: &CancellationToken) {
        let mut backoff = Backoff::with_cap(RETRY_CAP);
        loop {
            let Some(client) = self.live_client() else {
                return;
            };
            if client.session_id().0 != session {
                return; // that session ended, and the node with it
            }
            if connected(&client).is_ok() {
                match self
                    .call("delete our node", client.delete(path, None))
                    .await
                {
                    Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                        if let Some((parent, _)) = path.rsplit_once('/') {
                            self.tidy_parent(&client, parent).await;
                        }
                        return;
                    }
                    Ok(Err(e)) if no_data_change(&e) && !matches!(e, zk::Error::Throttled) => {
                        tracing::warn!(error = %e, node = %crate::layout::shown(path), "cannot delete a lock node");
                        return;
                    }
                    _ => {}
                }
            }
            if stop.is_cancelled() {
                return;
            }
            tokio::time::sleep(backoff.next_nap()).await;
        }
    }
}
