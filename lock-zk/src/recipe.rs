//! The lock recipe in Apache Curator's node layout (the one its
//! `InterProcessMutex` uses): the node names, queueing a node (or finding
//! the one a lost reply created) and waiting for its turn, watching only the
//! node just before it.

use std::sync::atomic::Ordering;

use lock_core::backend::{AcquireRequest, WaitBudget};
use lock_core::{Error, LockName, OwnerToken, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::backend::ZkBackend;
use crate::error::{convert, no_data_change, unavailable};
use crate::handover::Waiter;
use crate::session::connected;

/// Lock parents live under this node, below the chroot: `/locks/<name>`.
pub const ROOT: &str = "/locks";

/// The lock name of Curator's `InterProcessMutex`: nodes are
/// `_c_<uuid>-lock-<sequence>`.
const LOCK_NAME: &str = "lock-";

/// The version a check or write accepts whatever the node's version.
const ANY_VERSION: i32 = -1;

/// Curator's protection prefix.
pub(crate) const PROTECTED: &str = "_c_";

/// Our node in a lock's queue.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) czxid: i64,
    /// The listing of the parent sent right behind the create that made
    /// the node, with when that create was sent, until it is used; `None`
    /// for a node found again, or if that listing failed.
    vouched: Option<Vouched>,
}

/// A listing of a lock's parent answered after a write of our session that
/// the leader committed (our create, or a check of our node) was applied.
#[derive(Clone, Debug)]
struct Vouched {
    /// When that write was sent.
    sent: Instant,
    children: Vec<String>,
}

impl ZkBackend {
    /// Creates our node under the lock's parent, or finds the one an earlier
    /// attempt created (when `look_first`: its reply may have been lost).
    pub(crate) async fn enqueue(
        &self,
        client: &zk::Client,
        req: &AcquireRequest,
        look_first: bool,
    ) -> Result<Node> {
        let parent = parent_path(&req.name);
        let prefix = node_prefix(req.owner);
        if (look_first || self.is_uncertain(req.owner))
            && let Some(node) = self.find_own(client, &req.name, req.owner).await?
        {
            self.set_uncertain(req.owner, false);
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
            let create = client.create(&path, &[], &options);
            let list = client.list_children(&parent);
            let created = self.call("create the lock node", create).await;
            match created {
                Ok(Ok((stat, sequence))) => {
                    self.set_uncertain(req.owner, false);
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
                Ok(Err(zk::Error::NoNode)) => self.make_parent(client, &parent).await?,
                Ok(Err(e)) => {
                    if !no_data_change(&e) {
                        self.set_uncertain(req.owner, true);
                    }
                    return Err(convert("create the lock node", e));
                }
                Err(e) => {
                    self.set_uncertain(req.owner, true);
                    return Err(e);
                }
            }
        }
        Err(unavailable(format!(
            "the lock parent {parent} kept disappearing"
        )))
    }

    /// Creates `/locks/<name>`: a container node where the server knows
    /// them, else a persistent one.
    async fn make_parent(&self, client: &zk::Client, parent: &str) -> Result<()> {
        let acls = self.acls();
        for _ in 0..3 {
            let containers = self.inner.containers.load(Ordering::Relaxed);
            let mode = if containers {
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
                Err(zk::Error::NoNode) => {
                    let root = zk::CreateMode::Persistent.with_acls(acls);
                    match self
                        .call("create the locks root", client.create(ROOT, &[], &root))
                        .await?
                    {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(convert("create the locks root", e)),
                    }
                }
                Err(zk::Error::Unimplemented) if containers => {
                    tracing::info!(
                        "the ZooKeeper server has no container nodes; lock parents are deleted by distlock when empty"
                    );
                    self.inner.containers.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(convert("create the lock parent", e)),
            }
        }
        Err(Error::backend(format!(
            "could not create the lock parent {parent}"
        )))
    }

    /// Our node under `name` in this session, if there is one. Any other
    /// node of the same owner is deleted: a second one (an attempt applied
    /// twice) or one left by an earlier session of this backend (it dies
    /// with that session, so it must not be waited on).
    async fn find_own(
        &self,
        client: &zk::Client,
        name: &LockName,
        owner: OwnerToken,
    ) -> Result<Option<Node>> {
        let parent = parent_path(name);
        let Some(children) = self.children(client, &parent).await? else {
            return Ok(None);
        };
        self.adopt(client, &parent, owner, &children).await
    }

    /// Among `children`, the lowest-sequence node of `owner` that belongs to
    /// this session; every other node of `owner` is deleted.
    async fn adopt(
        &self,
        client: &zk::Client,
        parent: &str,
        owner: OwnerToken,
        children: &[String],
    ) -> Result<Option<Node>> {
        let session = client.session_id().0;
        let mut kept: Option<Node> = None;
        for (name, stat) in self.nodes_of(client, parent, owner, children).await? {
            let path = format!("{parent}/{name}");
            if stat.ephemeral_owner == session && kept.is_none() {
                kept = Some(Node {
                    name,
                    czxid: stat.czxid,
                    vouched: None,
                });
                continue;
            }
            tracing::debug!(node = %path, "deleting a stale or second node of the same owner");
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

    /// `owner`'s nodes among `children` that still exist, in queue order,
    /// with their stats.
    pub(crate) async fn nodes_of(
        &self,
        client: &zk::Client,
        parent: &str,
        owner: OwnerToken,
        children: &[String],
    ) -> Result<Vec<(String, zk::Stat)>> {
        let prefix = node_prefix(owner);
        let mut found = Vec::new();
        for (_, name) in queue(children)
            .into_iter()
            .filter(|(_, c)| c.starts_with(&prefix))
        {
            let path = format!("{parent}/{name}");
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

    /// Whether our node at `path` (created by this session, with `czxid`)
    /// is still there as the leader sees it. A read alone may come from a
    /// follower cut off from the leader, which answers from its old state
    /// until it notices, and `sync` is answered by a leader that may already
    /// have been replaced. So this is a transaction that only checks that
    /// the node exists, which the leader commits with a quorum and the
    /// server applies before it answers, then a read of the node on the same
    /// session, which the server answers after that transaction: both sent
    /// at once, one round trip.
    pub(crate) async fn confirm(
        &self,
        client: &zk::Client,
        path: &str,
        czxid: i64,
    ) -> Result<std::result::Result<bool, zk::Error>> {
        let confirmed = self.confirm_and_list(client, path, czxid, None).await?;
        Ok(confirmed.map(|(mine, _)| mine))
    }

    /// [`Self::confirm`], and in the same round trip, sent last, a listing
    /// of `parent` if given: answered after the check was applied, it is
    /// vouched for by it.
    async fn confirm_and_list(
        &self,
        client: &zk::Client,
        path: &str,
        czxid: i64,
        parent: Option<&str>,
    ) -> Result<std::result::Result<(bool, Option<Vec<String>>), zk::Error>> {
        let mut check = client.new_multi_writer();
        if let Err(e) = check.add_check_version(path, ANY_VERSION) {
            return Ok(Err(e));
        }
        let committed = check.commit();
        let read = client.check_stat(path);
        let list = parent.map(|p| client.list_children(p));
        let session = client.session_id().0;
        self.call("confirm our node", async {
            let list = async {
                match list {
                    Some(list) => list.await.map(Some),
                    None => Ok(None),
                }
            };
            let (committed, read, listed) = tokio::join!(committed, read, list);
            match committed {
                Ok(_) => {}
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::NoNode,
                    ..
                }) => return Ok((false, None)),
                Err(e) => return Err(e.into()),
            }
            let mine = read?.is_some_and(|s| s.czxid == czxid && s.ephemeral_owner == session);
            Ok((mine, listed?))
        })
        .await
    }

    /// Waits until our node is the first of the queue, watching only the
    /// node just before it each time, and returns when the request that
    /// vouches for the grant was sent.
    ///
    /// The listing that finds us first may come from a follower cut off
    /// from the leader, so it cannot vouch for our session: the leader may
    /// have expired it meanwhile. A write of our session that the leader
    /// committed can, when the listing was answered after it: it counts for
    /// the session like any request, and every node before ours that the
    /// listing lacks was gone by then, for good. So every listing here
    /// comes right behind such a write on the same session: our create (the
    /// listing sent with it), else the check of [`Self::confirm`], sent
    /// together with the listing in one round trip.
    pub(crate) async fn wait_for_turn(
        &self,
        client: &zk::Client,
        name: &LockName,
        owner: OwnerToken,
        node: &mut Node,
        budget: &WaitBudget,
    ) -> Result<Instant> {
        let parent = parent_path(name);
        let prefix = node_prefix(owner);
        loop {
            connected(client)?;
            let Vouched { sent, children } = match node.vouched.take() {
                Some(vouched) => vouched,
                None => {
                    budget.attempted();
                    let path = format!("{parent}/{}", node.name);
                    let sent = Instant::now();
                    match self
                        .confirm_and_list(client, &path, node.czxid, Some(&parent))
                        .await?
                    {
                        Ok((true, children)) => Vouched {
                            sent,
                            children: children.unwrap_or_default(),
                        },
                        Ok((false, _)) => return Err(Error::not_held(name)),
                        Err(e) => return Err(convert("confirm our place", e)),
                    }
                }
            };
            let queue = queue(&children);
            if queue.iter().filter(|(_, n)| n.starts_with(&prefix)).count() > 1 {
                // An attempt applied twice, or a node of an earlier session:
                // keep this session's oldest.
                *node = self
                    .adopt(client, &parent, owner, &children)
                    .await?
                    .ok_or_else(|| Error::not_held(name))?;
                continue;
            }
            let Some(place) = queue.iter().position(|(_, n)| **n == node.name) else {
                return Err(Error::not_held(name));
            };
            if place == 0 {
                return Ok(sent);
            }
            if budget.is_over() {
                return Err(budget.exhausted(name));
            }
            budget.waiting();
            let before = format!("{parent}/{}", queue[place - 1].1);
            let waiter = Waiter {
                session: client.session_id().0,
                path: format!("{parent}/{}", node.name),
                czxid: node.czxid,
            };
            let registration = self.inner.handovers.register(&before, waiter, budget);
            let watcher = match self
                .call("watch the predecessor", client.get_and_watch_data(&before))
                .await?
            {
                Ok((_, _, watcher)) => watcher,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(convert("watch the predecessor", e)),
            };
            let Some(event) = budget.race(watcher.changed()).await else {
                return Err(budget.exhausted(name));
            };
            match event.event_type {
                zk::EventType::NodeDeleted => {
                    self.inner.wakeups.fetch_add(1, Ordering::Relaxed);
                    if let Some(Some(sent)) = budget.race(registration.handed_over()).await {
                        return Ok(sent);
                    }
                }
                zk::EventType::Session if event.session_state.is_terminated() => {
                    return Err(unavailable(format!(
                        "the session ended while waiting: {}",
                        event.session_state
                    )));
                }
                _ => {}
            }
        }
    }
}

/// `/locks/<name>`, the parent of one lock's nodes.
pub(crate) fn parent_path(name: &LockName) -> String {
    format!("{ROOT}/{name}")
}

/// `_c_<owner as a UUID>-lock-`: the name of an owner's node before the
/// server appends the sequence number.
pub(crate) fn node_prefix(owner: OwnerToken) -> String {
    let v = owner.to_u128();
    format!(
        "{PROTECTED}{:08x}-{:04x}-{:04x}-{:04x}-{:012x}-{LOCK_NAME}",
        v >> 96,
        (v >> 80) & 0xffff,
        (v >> 64) & 0xffff,
        (v >> 48) & 0xffff,
        v & 0xffff_ffff_ffff
    )
}

/// The sequence number of a lock node: what follows the last `lock-`, as
/// Curator sorts them.
fn sequence_of(child: &str) -> Option<i64> {
    let (_, digits) = child.rsplit_once(LOCK_NAME)?;
    digits.parse().ok()
}

/// The lock nodes among `children`, in queue order.
pub(crate) fn queue(children: &[String]) -> Vec<(i64, &String)> {
    let mut queue: Vec<(i64, &String)> = children
        .iter()
        .filter_map(|c| sequence_of(c).map(|s| (s, c)))
        .collect();
    queue.sort();
    queue
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_follow_curator() {
        let owner = OwnerToken::from_hex("0123456789abcdef0011223344556677").unwrap();
        assert_eq!(
            node_prefix(owner),
            "_c_01234567-89ab-cdef-0011-223344556677-lock-"
        );
        assert!(node_prefix(owner)[3..].starts_with(&owner.short()));
        let name = format!("{}0000000042", node_prefix(owner));
        assert_eq!(sequence_of(&name), Some(42));
        assert_eq!(sequence_of("unrelated"), None);
    }

    #[test]
    fn the_queue_is_ordered_by_sequence_only() {
        let children: Vec<String> = [
            "_c_ffffffff-0000-0000-0000-000000000000-lock-0000000003",
            "_c_00000000-0000-0000-0000-000000000000-lock-0000000010",
            "not-a-lock-node",
            "_c_88888888-0000-0000-0000-000000000000-lock-0000000001",
        ]
        .map(String::from)
        .to_vec();
        let order: Vec<i64> = queue(&children).iter().map(|(s, _)| *s).collect();
        assert_eq!(order, [1, 3, 10]);
    }
}
