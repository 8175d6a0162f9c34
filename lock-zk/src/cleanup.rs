//! Giving up a place in a lock's queue: deleting our node when a wait ends
//! without a grant (now, or in the background while the session lives),
//! remembering owners whose create may have been applied unseen, and
//! deleting a lock parent a release left empty where the server does not.

use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::backend::Backoff;
use lock_core::{LockName, OwnerToken, Result};
use zookeeper_client as zk;

use crate::backend::ZkBackend;
use crate::error::convert;
use crate::recipe::{Node, node_prefix, parent_path};
use crate::session::connected;

/// Longest pause between retries of a failed wait or cleanup.
pub(crate) const RETRY_CAP: Duration = Duration::from_millis(500);

impl ZkBackend {
    /// Deletes every node `owner` has under `name`; `Ok` when none is left.
    async fn remove_nodes(
        &self,
        client: &zk::Client,
        name: &LockName,
        owner: OwnerToken,
    ) -> Result<()> {
        let parent = parent_path(name);
        let prefix = node_prefix(owner);
        let Some(children) = self.children(client, &parent).await? else {
            return Ok(());
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
        self.tidy_parent(client, &parent).await;
        Ok(())
    }

    /// Deletes an empty lock parent where the server does not do it.
    pub(crate) async fn tidy_parent(&self, client: &zk::Client, parent: &str) {
        if self.inner.containers.load(Ordering::Relaxed) {
            return;
        }
        match self
            .call("delete the lock parent", client.delete(parent, None))
            .await
        {
            Ok(Ok(()) | Err(zk::Error::NotEmpty | zk::Error::NoNode)) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, parent, "could not delete an empty lock parent")
            }
            Err(e) => tracing::debug!(error = %e, parent, "could not delete an empty lock parent"),
        }
    }

    /// Deletes our queued node by its path, if its session is still the
    /// live one; `false` if that could not be done.
    pub(crate) async fn delete_queued(&self, session: i64, name: &LockName, node: &Node) -> bool {
        let Some(client) = self.inner.live_client() else {
            return true; // the session is gone, and its nodes with it
        };
        if client.session_id().0 != session {
            return true;
        }
        if connected(&client).is_err() {
            return false;
        }
        let parent = parent_path(name);
        let path = format!("{parent}/{}", node.name);
        match self
            .call("leave the queue", client.delete(&path, None))
            .await
        {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                self.tidy_parent(&client, &parent).await;
                true
            }
            _ => false,
        }
    }

    /// Removes `owner`'s nodes under `name` now, or keeps trying in the
    /// background for as long as the session that owns them lives.
    pub(crate) async fn leave(&self, name: &LockName, owner: OwnerToken) -> Result<()> {
        let Some(client) = self.inner.live_client() else {
            // The session is gone, and its ephemeral nodes with it.
            return Ok(());
        };
        let outcome = match connected(&client) {
            Ok(()) => self.remove_nodes(&client, name, owner).await,
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
                tokio::spawn(async move { backend.keep_removing(client, name, owner).await });
                Err(e)
            }
        }
    }

    /// Retries [`Self::remove_nodes`] while `client`'s session lives.
    async fn keep_removing(&self, client: zk::Client, name: LockName, owner: OwnerToken) {
        let mut backoff = Backoff::with_cap(RETRY_CAP);
        loop {
            if client.state().is_terminated() {
                return;
            }
            if connected(&client).is_ok() {
                match self.remove_nodes(&client, &name, owner).await {
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

    pub(crate) fn is_uncertain(&self, owner: OwnerToken) -> bool {
        self.inner
            .uncertain
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&owner.to_u128())
    }

    pub(crate) fn set_uncertain(&self, owner: OwnerToken, yes: bool) {
        let mut set = self
            .inner
            .uncertain
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if yes {
            set.insert(owner.to_u128());
        } else {
            set.remove(&owner.to_u128());
        }
    }
}
