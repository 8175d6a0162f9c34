//! Hand-over between a holder and a waiter of the same backend: the
//! release of a lock whose next node is a waiter of this backend, on the
//! same session, grants that waiter without a round trip of its own
//! (README, Protocol 7; the registry is lock-core's [`Handovers`]).
//!
//! The release sends, right behind its delete, a read of the waiter's node;
//! the session's requests are answered in order, so the read sees the state
//! after the delete. When the delete succeeded and the waiter's node is
//! still there, made by this session, the waiter holds the lock, by
//! Curator's rule (the first node holds it): the deleted node was the
//! holder, so no node below it was left; the waiter's last listing showed
//! nothing between it and that node; and every node made since comes after
//! the waiter's. The delete, a write of the session that the leader
//! committed, vouches for the session as the waiter's own check would, so
//! the grant counts from when it was sent.

use lock_core::backend::Handovers;
use tokio::time::Instant;
use zookeeper_client as zk;

/// What a release checks of the waiter behind it.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) session: i64,
    pub(crate) path: String,
    pub(crate) czxid: i64,
}

/// Waiters by the path of the node each watches; a grant carries when the
/// delete that vouches for it was sent.
pub(crate) type ZkHandovers = Handovers<Waiter, Instant>;

/// Deletes the holder's node at `path` on `client`'s session, and hands the
/// lock to the waiter of this backend watching it, if there is one on this
/// session and its node is still there: the delete's outcome.
pub(crate) async fn delete_and_hand_over(
    handovers: &ZkHandovers,
    client: &zk::Client,
    path: &str,
) -> Result<(), zk::Error> {
    let session = client.session_id().0;
    let next = handovers.take(path).filter(|h| h.waiter.session == session);
    let sent = Instant::now();
    let deleted = client.delete(path, None);
    let Some(next) = next else {
        return deleted.await;
    };
    let read = client.check_stat(&next.waiter.path);
    let (deleted, read) = tokio::join!(deleted, read);
    let still_there = matches!(read, Ok(Some(stat))
        if stat.czxid == next.waiter.czxid && stat.ephemeral_owner == session);
    if deleted.is_ok() && still_there {
        next.grant(sent);
    }
    deleted
}
