//! Hand-over between a holder and a waiter of the same backend: the
//! release of a lock whose next node is a waiter of this backend, on the
//! same session, grants that waiter without a round trip of its own.
//!
//! A waiter registers the node it watches (its predecessor) before it
//! waits. A release that deletes that node on the same session sends, right
//! behind the delete, a read of the waiter's node; the session's requests
//! are answered in order, so the read sees the state after the delete.
//! When the delete succeeded and the waiter's node is still there, made by
//! this session, the waiter holds the lock, by Curator's rule (the first
//! node holds it): the deleted node was the holder, so no node below it was
//! left; the waiter's last listing showed nothing between it and that node;
//! and every node made since comes after the waiter's. The delete, a write
//! of the session that the leader committed, vouches for the session as the
//! waiter's own check would, so the grant counts from when it was sent.
//! In every other case (a holder in another process, a delete or read that
//! failed, a release cancelled midway) the waiter lists the queue again, as
//! before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;
use zookeeper_client as zk;

/// Waiters of this backend by the path of the node each watches.
#[derive(Debug, Default)]
pub(crate) struct Handovers {
    waiting: Mutex<HashMap<String, Waiter>>,
}

/// A waiter's node, and where to send the time its grant counts from.
#[derive(Debug)]
struct Waiter {
    session: i64,
    path: String,
    czxid: i64,
    grant: oneshot::Sender<Instant>,
}

/// A waiter's registration; withdrawn when dropped unless a release took it.
pub(crate) struct Registration {
    handovers: Arc<Handovers>,
    watched: String,
    path: String,
    granted: oneshot::Receiver<Instant>,
}

impl Handovers {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers our node at `path` (made by `session`, with `czxid`) as
    /// waiting for the node at `watched` to go.
    pub(crate) fn register(
        self: &Arc<Self>,
        watched: &str,
        session: i64,
        path: &str,
        czxid: i64,
    ) -> Registration {
        let (grant, granted) = oneshot::channel();
        let waiter = Waiter {
            session,
            path: path.to_owned(),
            czxid,
            grant,
        };
        self.waiting().insert(watched.to_owned(), waiter);
        Registration {
            handovers: self.clone(),
            watched: watched.to_owned(),
            path: path.to_owned(),
            granted,
        }
    }

    /// Deletes the holder's node at `path` on `client`'s session, and
    /// hands the lock to the waiter of this backend watching it, if any:
    /// the delete's outcome. The caller sends nothing in between.
    pub(crate) async fn delete_and_hand_over(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<(), zk::Error> {
        let session = client.session_id().0;
        let next = self.waiting().remove(path).filter(|w| w.session == session);
        let sent = Instant::now();
        let deleted = client.delete(path, None);
        let Some(next) = next else {
            return deleted.await;
        };
        let read = client.check_stat(&next.path);
        let (deleted, read) = tokio::join!(deleted, read);
        if deleted.is_ok()
            && matches!(read, Ok(Some(stat)) if stat.czxid == next.czxid && stat.ephemeral_owner == session)
        {
            let _ = next.grant.send(sent);
        }
        deleted
    }
}

impl Registration {
    /// After the watched node was deleted: when a release of this backend
    /// deleted it and handed the lock over, the time the grant counts from.
    pub(crate) async fn handed_over(mut self) -> Option<Instant> {
        let taken = {
            let mut waiting = self.handovers.waiting();
            match waiting.get(&self.watched) {
                // Nobody took it: the node went some other way.
                Some(w) if w.path == self.path => {
                    waiting.remove(&self.watched);
                    false
                }
                _ => true,
            }
        };
        if !taken {
            return None;
        }
        // The release that took it answers once its replies are in, which
        // come right behind the event that woke us.
        (&mut self.granted).await.ok()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiting = self.handovers.waiting();
        if waiting
            .get(&self.watched)
            .is_some_and(|w| w.path == self.path)
        {
            waiting.remove(&self.watched);
        }
    }
}
