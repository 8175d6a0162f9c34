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
//!
//! A waiter for a semaphore's mutex would, once it holds the mutex, make
//! its lease node and list the leases. The hand-over does that for it in
//! the same round trip: one transaction deletes the holder's mutex node,
//! checks that the waiter's node is there and makes the waiter's lease
//! node, so the lease is never made without the mutex held for it, and a
//! listing of the leases follows on the session. The node the check finds
//! is the waiter's own, made on this session: the parent lived on from the
//! waiter's create to the transaction (the holder's node, made earlier,
//! was in it), and a parent never gives out a sequence number twice. A
//! release of a lease lists the leases, behind its delete, for the
//! acquirer of this backend that holds the semaphore's mutex and waits for
//! them to change.

use lock_core::backend::Handover;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::node::{ANY_VERSION, Node, Vouched};
use crate::session::Core;
use crate::waiters::{Granted, LeaseToMake, Waiter};

impl Core {
    /// The waiter of this backend registered for `watched`, if it waits on
    /// `client`'s session (a hand-over vouches for that session only).
    fn waiter_of(&self, client: &zk::Client, watched: &str) -> Option<Handover<Waiter, Granted>> {
        let session = client.session_id().0;
        self.handovers
            .take(watched)
            .filter(|h| h.waiter.session == session)
    }

    /// Deletes the holder's node at `path` on `client`'s session, and hands
    /// the lock to the waiter of this backend watching it, if there is one
    /// on this session and its node is still there: the delete's outcome.
    pub(crate) async fn delete_and_hand_over(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<(), zk::Error> {
        let sent = Instant::now();
        let Some(next) = self.waiter_of(client, path) else {
            return client.delete(path, None).await;
        };
        if let Some(lease) = next.waiter.lease.clone() {
            return self
                .hand_over_with_lease(client, path, next, lease, sent)
                .await;
        }
        // A delete and a read: cheaper on the server than a transaction
        // with the delete and a check, though one request more.
        let deleted = client.delete(path, None);
        let read = client.check_stat(&next.waiter.path);
        let (deleted, read) = tokio::join!(deleted, read);
        let session = client.session_id().0;
        let still_there = matches!(read, Ok(Some(stat))
            if stat.czxid == next.waiter.czxid && stat.ephemeral_owner == session);
        if deleted.is_ok() && still_there {
            next.grant(Granted { sent, lease: None });
        }
        deleted
    }

    /// Deletes a semaphore's lease node at `path` and, if an acquirer of
    /// this backend holding the semaphore's mutex waits for the leases to
    /// change, lists them for it behind the delete, which
    /// vouches for the listing as the acquirer's own check would: the
    /// acquirer counts from that listing instead of making its own.
    pub(crate) async fn delete_and_list_for_counter(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<(), zk::Error> {
        let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
        let sent = Instant::now();
        let Some(next) = self.waiter_of(client, parent) else {
            return client.delete(path, None).await;
        };
        let deleted = client.delete(path, None);
        // No watch: the acquirer waits while the leases are more than the
        // permits, and among distlock's acquirers only it makes leases, so
        // with ours gone there is most often room; when there is not (a
        // Curator acquirer's lease, a permit count that differs from
        // ours), it lists again with a watch.
        let listed = client.list_children(parent);
        let (deleted, listed) = tokio::join!(deleted, listed);
        if let (Ok(()), Ok(children)) = (&deleted, listed)
            && let Some((_, name)) = next.waiter.path.rsplit_once('/')
        {
            let node = Node {
                name: name.to_owned(),
                czxid: next.waiter.czxid,
                vouched: Some(Vouched { sent, children }),
            };
            next.grant(Granted {
                sent,
                lease: Some(node),
            });
        }
        deleted
    }

    /// The hand-over of a semaphore's mutex, making the waiter's lease node.
    /// The waiter marked its owner uncertain before it registered, and
    /// keeps it so until it has the node in hand: a give-up in between
    /// finds and deletes the node by owner.
    async fn hand_over_with_lease(
        &self,
        client: &zk::Client,
        path: &str,
        next: Handover<Waiter, Granted>,
        lease: LeaseToMake,
        sent: Instant,
    ) -> Result<(), zk::Error> {
        let session = client.session_id().0;
        let options = zk::CreateMode::EphemeralSequential.with_acls(self.acls());
        let mut multi = client.new_multi_writer();
        multi.add_delete(path, None)?;
        multi.add_check_version(&next.waiter.path, ANY_VERSION)?;
        multi.add_create(
            &format!("{}/{}", lease.parent, lease.prefix),
            &lease.data,
            &options,
        )?;
        let committed = multi.commit();
        // No watch: most often the lease is granted at once, and a watch
        // left unused costs a request to remove it. A waiter that finds the
        // semaphore full lists again with one.
        let listed = client.list_children(&lease.parent);
        let (committed, listed) = tokio::join!(committed, listed);
        let made = match committed {
            Ok(results) => results.into_iter().find_map(|r| match r {
                zk::MultiWriteResult::Create { path, stat } => Some((path, stat)),
                _ => None,
            }),
            // Nothing was applied: the waiter finds its turn by itself.
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                return if index == 0 {
                    Err(source)
                } else {
                    client.delete(path, None).await
                };
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => return Err(source),
        };
        // Our node is gone. Whatever stops short of a grant below leaves the
        // node to the waiter, whose owner is uncertain: its next attempt
        // adopts the node, its give-up deletes it.
        let Some((made, stat)) = made else {
            return Ok(());
        };
        let czxid = if stat.is_invalid() {
            match client.check_stat(&made).await {
                Ok(Some(stat)) if stat.ephemeral_owner == session => stat.czxid,
                _ => return Ok(()),
            }
        } else {
            stat.czxid
        };
        let Some((_, name)) = made.rsplit_once('/') else {
            return Ok(());
        };
        let vouched = listed.ok().map(|children| Vouched { sent, children });
        let node = Node {
            name: name.to_owned(),
            czxid,
            vouched,
        };

        // Not delivered if the waiter's acquire ended meanwhile: its own
        // cleanup (a give-up or the abandon, both by owner, since the
        // waiter marked its owner uncertain before it registered) lists
        // the leases behind this transaction and deletes the node. The
        // release must not delete it: a waiter that goes on adopts it.
        next.grant(Granted {
            sent,
            lease: Some(node),
        });
        Ok(())
    }
}
