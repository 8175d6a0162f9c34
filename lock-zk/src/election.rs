//! Elections in the layout of Curator's `LeaderLatch` (`layout.rs`): the
//! candidates queue as the mutex's acquirers do, the first node leads, its
//! data is the leader's value (a latch's participant id) and its czxid the
//! term. Here: reading the leader, changing its value, and waiting for a
//! change with a watch on the leader's node (or on the parent while nobody
//! leads).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Leader, Lease};
use lock_core::{Error, LockKind, LockName, Result};
use tokio::time::{Instant, timeout_at};
use zookeeper_client as zk;

use crate::error::convert;
use crate::expiry::{Kept, czxid_of, token};
use crate::layout::{Queue, owner_of};
use crate::session::{Core, connected};

impl Core {
    /// Replaces the value of `lease`'s node, if it is still the lease's
    /// live node.
    pub(crate) async fn proclaim(self: &Arc<Self>, lease: &Lease, value: &str) -> Result<()> {
        let not_held = || Error::not_held(lease.name());
        let (owner, czxid) = (lease.owner().to_u128(), czxid_of(lease));
        let kept = self.kept(owner, czxid);
        // A lease this backend keeps must also be in force: past its
        // deadline it is over even before the expiry task deletes the node.
        let over = match &kept {
            Some(Kept::Expired) => true,
            Some(Kept::Live { .. }) => self.in_force(owner, czxid).is_none(),
            None => false,
        };
        if over || lease.kind() != LockKind::Leader {
            return Err(not_held());
        }
        let client = self.client().await?;
        connected(&client)?;
        let queue = Queue::of_lease(lease.name(), lease.kind());
        let Some((path, _)) = self.node_of(&client, &queue, lease, kept).await? else {
            return Err(not_held());
        };
        self.refuse_before_a_latch(&client, &queue, &path).await?;
        // The write is committed by the leader and answers with the node's
        // stat, which says whether it was the lease's node (its czxid), as
        // `confirm` does for a renewal.
        let written = client.set_data(&path, value.as_bytes(), None);
        match self.call("proclaim", written).await? {
            Ok(stat) if stat.czxid == czxid => Ok(()),
            Ok(_) | Err(zk::Error::NoNode) => Err(not_held()),
            Err(e) => Err(convert("proclaim", e)),
        }
    }

    /// Refuses a proclaim while the candidate next in line after our node
    /// at `path` is not distlock's (a Curator latch): a `LeaderLatch`
    /// watches the node before its own with a one-shot data watch and looks
    /// again only when that node is deleted, so a change of our node's data
    /// would spend its watch and it would never lead. A latch that joins
    /// while the write is under way can still be caught so (README,
    /// Elections).
    async fn refuse_before_a_latch(
        &self,
        client: &zk::Client,
        queue: &Queue,
        path: &str,
    ) -> Result<()> {
        let ours = path.rsplit_once('/').map_or(path, |(_, node)| node);
        let children = self
            .children(client, &queue.parent)
            .await?
            .unwrap_or_default();
        let order = queue.order(&children);
        let next = order
            .iter()
            .skip_while(|(_, node)| node.as_str() != ours)
            .nth(1);
        match next {
            Some((_, node)) if owner_of(node).is_none() => Err(Error::backend(
                "zookeeper: no proclaim while a Curator LeaderLatch candidate is next in line: \
                 the latch would stop watching the leader's node when its data changes, and \
                 never lead",
            )),
            _ => Ok(()),
        }
    }

    /// The leader of the election `name`: its first node, whoever made it.
    pub(crate) async fn leader(self: &Arc<Self>, name: &LockName) -> Result<Option<Leader>> {
        let client = self.client().await?;
        let queue = Queue::election(name);
        self.catch_up(&client, &queue.parent).await;
        self.read_first(&client, &queue, name, |path, node| {
            let client = &client;
            async move {
                match self.call("read the leader", client.get_data(&path)).await? {
                    Ok((data, stat)) => Ok(Some(leader_of(&node, &data, stat.czxid))),
                    Err(zk::Error::NoNode) => Ok(None),
                    Err(e) => Err(convert("read the leader", e)),
                }
            }
        })
        .await
    }

    /// Returns when the leader of `name` may no longer be `seen`, or after
    /// `within`.
    pub(crate) async fn leader_changed(
        self: &Arc<Self>,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + within;
        let client = self.client().await?;
        let queue = Queue::election(name);
        match timeout_at(deadline, self.watch_leader(&client, &queue, seen)).await {
            Ok(Ok(Some(watcher))) => {
                let _ = timeout_at(deadline, watcher.changed()).await;
                Ok(())
            }
            Ok(Ok(None)) | Err(_) => Ok(()),
            Ok(Err(e)) => Err(e),
        }
    }

    /// A watch that fires when the leader of `queue` changes from `seen`,
    /// or `None` if it already has. While somebody leads, the watch is on
    /// the leader's node, which goes when it leaves and changes when it
    /// proclaims (nobody can queue before it: sequence numbers only grow),
    /// so candidates joining wake no observer. While nobody leads, it is on
    /// the parent's children, or on the parent itself if it does not exist.
    async fn watch_leader(
        &self,
        client: &zk::Client,
        queue: &Queue,
        seen: Option<&Leader>,
    ) -> Result<Option<zk::OneshotWatcher>> {
        let parent = &queue.parent;
        loop {
            let listed = client.list_and_watch_children(parent);
            let (children, children_watch) = match self.call("watch the leader", listed).await? {
                Ok(listed) => listed,
                Err(zk::Error::NoNode) if seen.is_some() => return Ok(None),
                Err(zk::Error::NoNode) => {
                    let created = client.check_and_watch_stat(parent);
                    match self.call("watch the leader", created).await? {
                        Ok((None, watcher)) => return Ok(Some(watcher)),
                        // Made meanwhile: list it.
                        Ok((Some(_), _)) => continue,
                        Err(e) => return Err(convert("watch the leader", e)),
                    }
                }
                Err(e) => return Err(convert("watch the leader", e)),
            };
            let Some((_, first)) = queue.order(&children).first().copied() else {
                return Ok(seen.is_none().then_some(children_watch));
            };
            let path = format!("{parent}/{first}");
            let read = client.get_and_watch_data(&path);
            match self.call("watch the leader", read).await? {
                Ok((data, stat, watcher)) => {
                    let now = leader_of(first, &data, stat.czxid);
                    let same = Leader::unchanged(seen, Some(&now));
                    return Ok(same.then_some(watcher));
                }
                // Gone since the listing: look again.
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(convert("watch the leader", e)),
            }
        }
    }
}

/// The leader whose node is named `node`, holding `data`, made by the
/// transaction `czxid`: owned by nobody distlock knows when another
/// client (a Curator latch) made it.
fn leader_of(node: &str, data: &[u8], czxid: i64) -> Leader {
    let owner = owner_of(node).unwrap_or_default();
    Leader::new(owner, String::from_utf8_lossy(data), token(czxid), None)
}
