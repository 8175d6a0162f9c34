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
//! them to change; a read-write lock's release lists the lock's nodes for
//! every waiter behind its node.

use lock_core::backend::{Handover, Registration, WaitBudget};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::node::{ANY_VERSION, Node, Vouched};
use crate::session::Core;
use crate::waiters::{Granted, Handed, LeaseToMake, Waiter};

impl Core {
    /// The waiter of this backend registered for `watched`, if it waits on
    /// `client`'s session (a hand-over vouches for that session only).
    fn waiter_of(&self, client: &zk::Client, watched: &str) -> Option<Handover<Waiter, Handed>> {
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
            next.grant(Handed::Turn(Granted { sent, lease: None }));
        }
        deleted
    }

    /// Deletes a read-write lock's node at `path`, and lists the lock's
    /// nodes behind the delete for the waiters of this backend behind it
    /// (see [`Self::delete_and_list`]): a writer's release, for the
    /// readers that watch it (all of them), or the writer behind it; a
    /// reader's, for the writer behind it. A writer holds if the listing
    /// shows nothing before it, or else watches what the listing shows.
    /// Listed even when nobody waits yet: a waiter of this backend whose
    /// node was made before the delete may register while it is in flight
    /// (a reader asking again as the writer before it goes).
    pub(crate) async fn delete_and_list_for_sides(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<(), zk::Error> {
        self.delete_and_list(client, path, path).await
    }

    /// Deletes a semaphore's lease node at `path` and, if an acquirer of
    /// this backend holding the semaphore's mutex waits for the leases to
    /// change, lists them for it behind the delete (see
    /// [`Self::delete_and_list`]). No watch: the acquirer waits while the
    /// leases are more than the permits, and among distlock's acquirers
    /// only it makes leases, so with ours gone there is most often room;
    /// when there is not (a Curator acquirer's lease, a permit count that
    /// differs from ours), it lists again with a watch.
    pub(crate) async fn delete_and_list_for_counter(
        &self,
        client: &zk::Client,
        path: &str,
    ) -> Result<(), zk::Error> {
        let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
        if !self.handovers.has_waiters(parent) {
            return client.delete(path, None).await;
        }
        self.delete_and_list(client, path, parent).await
    }

    /// Deletes the node at `path` and lists its parent behind the delete
    /// for every waiter of this backend, on this session, registered for
    /// `watched`, those that register while the delete is in flight
    /// included. The delete vouches for the listing as each waiter's own
    /// check would, so the waiter reads it as its own instead of making a
    /// check and a listing. No watch: most often the listing ends the
    /// wait, and a watch left unused costs a request to remove it.
    async fn delete_and_list(
        &self,
        client: &zk::Client,
        path: &str,
        watched: &str,
    ) -> Result<(), zk::Error> {
        let session = client.session_id().0;
        let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
        let sent = Instant::now();
        let Some(releasing) = self.handovers.releasing(watched) else {
            return client.delete(path, None).await;
        };
        let deleted = client.delete(path, None);
        let listed = client.list_children(parent);
        let (deleted, listed) = tokio::join!(deleted, listed);
        let (Ok(()), Ok(children)) = (&deleted, listed) else {
            return deleted;
        };
        // A waiter that registered while the delete was in flight is
        // answered too: its node was made before the listing was answered,
        // on this session, or it finds the listing without its node and
        // reads the queue itself. Waiters on another session read it
        // themselves.
        let waiters = releasing.take_all();
        for next in waiters.into_iter().filter(|h| h.waiter.session == session) {
            next.grant(Handed::Listing(Vouched {
                sent,
                children: children.clone(),
            }));
        }
        deleted
    }

    /// The listing a release of this backend sends behind its delete for
    /// `registration`'s waiter (a read-write lock's, a semaphore's leases),
    /// once the node it watches is gone: waited for while `budget` lasts
    /// and no longer than a request may take, which bounds the release's
    /// own while it is polled. The listing only spares the waiter one of
    /// its own, and a release its caller stopped polling midway must not
    /// hold the waiter.
    pub(crate) async fn listing_for(
        &self,
        registration: Registration<Waiter, Handed>,
        budget: &WaitBudget,
    ) -> Option<Vouched> {
        let handed = budget.race(registration.handed_over());
        match tokio::time::timeout(self.config.timeout, handed).await {
            Ok(Some(Some(Handed::Listing(listed)))) => Some(listed),
            _ => None,
        }
    }

    /// The hand-over of a semaphore's mutex, making the waiter's lease node.
    /// The waiter marked its owner uncertain before it registered, and
    /// keeps it so until it has the node in hand: a give-up in between
    /// finds and deletes the node by owner.
    async fn hand_over_with_lease(
        &self,
        client: &zk::Client,
        path: &str,
        next: Handover<Waiter, Handed>,
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
        next.grant(Handed::Turn(Granted {
            sent,
            lease: Some(node),
        }));
        Ok(())
    }
}
