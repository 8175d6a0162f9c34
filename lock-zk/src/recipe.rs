//! The lock recipe in Apache Curator's node layouts (`layout.rs`): queueing
//! a node (or finding the one a lost reply created) and waiting for its
//! turn, watching only the one node that stands in its way.

use std::sync::atomic::Ordering;

use lock_core::backend::OwnerToken;
use lock_core::backend::{AcquireRequest, WaitBudget};
use lock_core::{Error, LockName, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{convert, no_data_change, unavailable};
use crate::layout::{Queue, is_root, owner_prefix};
use crate::node::{Node, Vouched};
use crate::session::{Core, connected};
use crate::waiters::{Granted, Handed, LeaseToMake, Waiter};

impl Core {
    /// Our node in `queue` for `req` (the one `slot` holds from an earlier
    /// attempt on this session, else a new one, or the one an earlier
    /// attempt created unseen when `look_first`), and the wait for its
    /// turn: the node, and the grant (when the request that vouches for it
    /// was sent, and what a hand-over made for it). `slot` keeps the node
    /// for the next attempt, and for the cleanup if the acquire gives up. `then` is what the turn's holder
    /// makes next (a semaphore's lease node), which a hand-over of the
    /// turn may make for it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn take_turn(
        &self,
        client: &zk::Client,
        queue: &Queue,
        req: &AcquireRequest,
        slot: &mut Option<(i64, Node)>,
        look_first: bool,
        then: Option<&LeaseToMake>,
        budget: &WaitBudget,
    ) -> Result<(Node, Granted)> {
        let (session, mut node) = self
            .place(client, queue, req, slot, look_first, budget)
            .await?;
        let turn = self
            .wait_for_turn(client, queue, &req.name, req.owner, &mut node, then, budget)
            .await;
        *slot = Some((session, node.for_later()));
        Ok((node, turn?))
    }

    /// Our node in `queue`: the one `slot` keeps from an earlier attempt on
    /// this session, or a new one enqueued (and kept in `slot`); with the
    /// session's id.
    pub(crate) async fn place(
        &self,
        client: &zk::Client,
        queue: &Queue,
        req: &AcquireRequest,
        slot: &mut Option<(i64, Node)>,
        look_first: bool,
        budget: &WaitBudget,
    ) -> Result<(i64, Node)> {
        let session = client.session_id().0;
        let node = match slot {
            Some((s, node)) if *s == session => node.clone(),
            _ => {
                budget.attempted();
                let data = req.value.as_bytes();
                self.enqueue(client, queue, req.owner, data, look_first)
                    .await?
            }
        };
        *slot = Some((session, node.for_later()));
        Ok((session, node))
    }

    /// Creates our node in `queue` holding `data` (a candidate's value, as
    /// a `LeaderLatch` node holds its participant id; nothing for a lock),
    /// or finds the one an earlier attempt created (when `look_first`: its
    /// reply may have been lost).
    pub(crate) async fn enqueue(
        &self,
        client: &zk::Client,
        queue: &Queue,
        owner: OwnerToken,
        data: &[u8],
        look_first: bool,
    ) -> Result<Node> {
        let parent = &queue.parent;
        let prefix = queue.node_prefix(owner);
        if (look_first || self.is_uncertain(owner))
            && let Some(node) = self.find_own(client, queue, owner).await?
        {
            self.set_uncertain(owner, false);
            return Ok(node);
        }
        let path = format!("{parent}/{prefix}");
        let acls = self.acls();
        let options = zk::CreateMode::EphemeralSequential.with_acls(acls);
        for _ in 0..4 {
            connected(client)?;
            let sent = Instant::now();
            // zookeeper-client sends a request when it is made, not when
            // its future is first polled, and the server answers a
            // session's requests in order: the listing is sent right behind
            // the create, in the same round trip, and includes our node.
            let create = client.create(&path, data, &options);
            let list = client.list_children(parent);
            let created = self.call("create the lock node", create).await;
            match created {
                Ok(Ok((stat, sequence))) => {
                    self.set_uncertain(owner, false);
                    // A listing that failed is only a lost shortcut: the
                    // wait lists again, vouched for by a check of the node.
                    let vouched = match self.call("list the lock's queue", list).await {
                        Ok(Ok(children)) => Some(Vouched { sent, children }),
                        _ => None,
                    };
                    return Ok(Node {
                        name: format!("{prefix}{sequence}"),
                        czxid: stat.czxid,
                        vouched,
                    });
                }
                // No parent: the listing failed too, and is dropped.
                Ok(Err(zk::Error::NoNode)) => self.make_parent(client, parent).await?,
                Ok(Err(e)) => {
                    if !no_data_change(&e) {
                        self.set_uncertain(owner, true);
                    }
                    return Err(convert("create the lock node", e));
                }
                Err(e) => {
                    self.set_uncertain(owner, true);
                    return Err(e);
                }
            }
        }
        Err(unavailable(format!(
            "the lock parent {parent} kept disappearing"
        )))
    }

    /// Creates a lock parent (`/locks/<name>`, `/semaphores/<name>/leases`,
    /// …) and what is missing above it: container nodes where the server
    /// knows them, else persistent ones; a family's root is persistent.
    async fn make_parent(&self, client: &zk::Client, parent: &str) -> Result<()> {
        let acls = self.acls();
        for _ in 0..3 {
            let containers = self.containers.load(Ordering::Relaxed);
            let root = is_root(parent);
            let mode = if containers && !root {
                zk::CreateMode::Container
            } else {
                zk::CreateMode::Persistent
            };
            let options = mode.with_acls(acls);
            match self
                .call(
                    "create the lock parent",
                    client.create(parent, &[], &options),
                )
                .await?
            {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) if !root => {
                    let (above, _) = parent.rsplit_once('/').unwrap_or_default();
                    Box::pin(self.make_parent(client, above)).await?;
                }
                Err(zk::Error::Unimplemented) if containers => {
                    tracing::info!(
                        "the ZooKeeper server has no container nodes; lock parents are deleted by distlock when empty"
                    );
                    self.containers.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(convert("create the lock parent", e)),
            }
        }
        Err(Error::backend(format!(
            "could not create the lock parent {parent}"
        )))
    }

    /// Our node in `queue` in this session, if there is one. Any other
    /// node of the same owner is deleted: a second one (an attempt applied
    /// twice) or one left by an earlier session of this backend (it dies
    /// with that session, so it must not be waited on).
    async fn find_own(
        &self,
        client: &zk::Client,
        queue: &Queue,
        owner: OwnerToken,
    ) -> Result<Option<Node>> {
        let Some(children) = self.children(client, &queue.parent).await? else {
            return Ok(None);
        };
        self.adopt(client, queue, owner, &children).await
    }

    /// Among `children`, the lowest-sequence node of `owner` that belongs to
    /// this session; every other node of `owner` is deleted.
    pub(crate) async fn adopt(
        &self,
        client: &zk::Client,
        queue: &Queue,
        owner: OwnerToken,
        children: &[String],
    ) -> Result<Option<Node>> {
        let session = client.session_id().0;
        let mut kept: Option<Node> = None;
        for (name, stat) in self.nodes_of(client, queue, owner, children).await? {
            let path = format!("{}/{name}", queue.parent);
            if stat.ephemeral_owner == session && kept.is_none() {
                kept = Some(Node {
                    name,
                    czxid: stat.czxid,
                    vouched: None,
                });
                continue;
            }
            tracing::debug!(node = %crate::layout::shown(&path), "deleting a stale or second node of the same owner");
            match self
                .call("delete a stale node", client.delete(&path, None))
                .await?
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(convert("delete a stale node", e)),
            }
        }
        Ok(kept)
    }

    /// `owner`'s nodes in `queue` among `children` that still exist, in
    /// queue order, with their stats.
    pub(crate) async fn nodes_of(
        &self,
        client: &zk::Client,
        queue: &Queue,
        owner: OwnerToken,
        children: &[String],
    ) -> Result<Vec<(String, zk::Stat)>> {
        let prefix = owner_prefix(owner);
        let mut found = Vec::new();
        for (_, name) in queue
            .order(children)
            .into_iter()
            .filter(|(_, c)| c.starts_with(&prefix))
        {
            let path = format!("{}/{name}", queue.parent);
            if let Some(stat) = self
                .call("read our node", client.check_stat(&path))
                .await?
                .map_err(|e| convert("read our node", e))?
            {
                found.push((name.clone(), stat));
            }
        }
        Ok(found)
    }

    /// The children of `parent`, or `None` if it does not exist.
    pub(crate) async fn children(
        &self,
        client: &zk::Client,
        parent: &str,
    ) -> Result<Option<Vec<String>>> {
        match self
            .call("list the lock's queue", client.list_children(parent))
            .await?
        {
            Ok(children) => Ok(Some(children)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(convert("list the lock's queue", e)),
        }
    }

    /// Waits until our node's turn comes by `queue`'s rule, watching only
    /// the one node in its way each time, and returns when the request that
    /// vouches for the grant was sent.
    ///
    /// The listing that finds our turn may come from a follower cut off
    /// from the leader, so it cannot vouch for our session: the leader may
    /// have expired it meanwhile. A write of our session that the leader
    /// committed can, when the listing was answered after it: it counts for
    /// the session like any request, and every node before ours that the
    /// listing lacks was gone by then, for good. So every listing here
    /// comes right behind such a write on the same session: our create (the
    /// listing sent with it), the check of [`Self::confirm`], sent
    /// together with the listing in one round trip, or the delete of a
    /// read-write lock's release by this backend on this session, which
    /// lists the lock for the waiters behind the node it deletes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn wait_for_turn(
        &self,
        client: &zk::Client,
        queue: &Queue,
        name: &LockName,
        owner: OwnerToken,
        node: &mut Node,
        then: Option<&LeaseToMake>,
        budget: &WaitBudget,
    ) -> Result<Granted> {
        let parent = &queue.parent;
        let prefix = owner_prefix(owner);
        loop {
            connected(client)?;
            let Some((Vouched { sent, children }, _)) = self
                .vouched_listing(client, queue, node, false, budget)
                .await?
            else {
                return Err(Error::not_held(name));
            };
            let order = queue.order(&children);
            if order.iter().filter(|(_, n)| n.starts_with(&prefix)).count() > 1 {
                // An attempt applied twice, or a node of an earlier session:
                // keep this session's oldest.
                *node = self
                    .adopt(client, queue, owner, &children)
                    .await?
                    .ok_or_else(|| Error::not_held(name))?;
                continue;
            }
            let Some(place) = order.iter().position(|(_, n)| **n == node.name) else {
                return Err(Error::not_held(name));
            };
            let Some(blocker) = queue.blocker(&order, place) else {
                return Ok(Granted { sent, lease: None });
            };
            if budget.is_over() {
                return Err(budget.exhausted(name));
            }
            budget.waiting();
            let before = format!("{parent}/{blocker}");
            let waiter = Waiter {
                session: client.session_id().0,
                path: format!("{parent}/{}", node.name),
                czxid: node.czxid,
                lease: then.cloned(),
            };
            if then.is_some() {
                // A hand-over may make a node for this owner from now on.
                self.set_uncertain(owner, true);
            }
            let registration = self.handovers.register(&before, waiter, budget);
            // Once registered, the wait does not end without asking
            // whether a release took the registration: a hand-over may have
            // granted the turn (and made a node for it) meanwhile. The
            // answer comes within the release's own request.
            let watched = match self
                .call("watch the predecessor", client.get_and_watch_data(&before))
                .await
            {
                Ok(Ok((_, _, watcher))) => Ok(Some(watcher)),
                Ok(Err(zk::Error::NoNode)) => Ok(None),
                Ok(Err(e)) => Err(convert("watch the predecessor", e)),
                Err(e) => Err(e),
            };
            let outcome = match watched {
                Ok(Some(watcher)) => match budget.race(watcher.changed()).await {
                    None => Err(budget.exhausted(name)),
                    Some(event) => match event.event_type {
                        zk::EventType::NodeDeleted => {
                            self.wakeups.fetch_add(1, Ordering::Relaxed);
                            Ok(())
                        }
                        zk::EventType::Session if event.session_state.is_terminated() => {
                            Err(session_ended_while_waiting(event.session_state))
                        }
                        _ => Ok(()),
                    },
                },
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if queue.has_sides() {
                // A read-write lock's release hands a listing, never the
                // turn: a wait that failed has no use for it. One is read
                // next time round, as our own listing would be; one without
                // our node (a registration that raced the release) is not
                // ours to read.
                if outcome.is_ok()
                    && let Some(listed) = self.listing_for(registration, budget).await
                    && listed.children.contains(&node.name)
                {
                    node.vouched = Some(listed);
                }
            } else if let Some(Handed::Turn(granted)) = registration.handed_over().await {
                return Ok(granted);
            }
            outcome?;
        }
    }
}

/// The error of a wait whose session ended under it.
pub(crate) fn session_ended_while_waiting(state: zk::SessionState) -> Error {
    unavailable(format!("the session ended while waiting: {state}"))
}
