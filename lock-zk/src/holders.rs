//! Who holds a lock, read from its nodes by the rules that admit them
//! (Curator's): the first node of a mutex or an election; the `N` oldest
//! of a semaphore's leases; a read-write lock's nodes that
//! `Queue::blocker` lets through.

use std::future::Future;
use std::sync::Arc;

use lock_core::backend::Holder;
use lock_core::{LockKind, LockName, Result};

use crate::error::{convert, unavailable};
use crate::expiry::token;
use crate::layout::{PROTECTED, Queue};
use crate::session::Core;
use zookeeper_client as zk;

impl Core {
    /// Every holder of `kind`'s semaphore or read-write lock of `name`.
    pub(crate) async fn group_holders(
        self: &Arc<Self>,
        name: &LockName,
        kind: LockKind,
    ) -> Result<Vec<Holder>> {
        let client = self.client().await?;
        let queue = Queue::of_lease(name, kind);
        let parent = &queue.parent;
        self.catch_up(&client, parent).await;
        let Some(children) = self.children(&client, parent).await? else {
            return Ok(Vec::new());
        };
        let order = queue.order(&children);
        let mut holders = Vec::new();
        for (place, (_, node)) in order.iter().enumerate() {
            let side = match kind {
                // The `N` oldest leases hold; younger ones wait.
                LockKind::Permit { permits } if place >= permits as usize => break,
                LockKind::Permit { .. } => kind,
                _ if node.contains("__WRIT__") => LockKind::Write,
                _ => LockKind::Read,
            };
            let waits = matches!(side, LockKind::Read | LockKind::Write)
                && Queue::of_lease(name, side).blocker(&order, place).is_some();
            if waits {
                continue;
            }
            let path = format!("{parent}/{node}");
            if let Some(holder) = self.holder_at(&client, &path, node).await? {
                holders.push(holder.of_kind(side));
            }
        }
        Ok(holders)
    }

    /// The holder of the mutex or the election (`kind`'s) of `name`: its
    /// first node.
    pub(crate) async fn first_holder(
        self: &Arc<Self>,
        name: &LockName,
        kind: LockKind,
    ) -> Result<Option<Holder>> {
        let client = self.client().await?;
        let queue = Queue::of_lease(name, kind);
        self.catch_up(&client, &queue.parent).await;
        let holder = self
            .read_first(&client, &queue, name, |path, node| {
                let client = &client;
                async move { self.holder_at(client, &path, &node).await }
            })
            .await?;
        Ok(holder.map(|h| h.of_kind(kind)))
    }

    /// What `read` makes of the first node of `queue` (given its path and
    /// name), looked up again if that node goes between the listing and
    /// the read (`read` gives `None`); `None` if the queue is empty.
    pub(crate) async fn read_first<T, F, Fut>(
        &self,
        client: &zk::Client,
        queue: &Queue,
        name: &LockName,
        read: F,
    ) -> Result<Option<T>>
    where
        F: Fn(String, String) -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        let parent = &queue.parent;
        for _ in 0..3 {
            let Some(children) = self.children(client, parent).await? else {
                return Ok(None);
            };
            let Some((_, first)) = queue.order(&children).first().copied() else {
                return Ok(None);
            };
            if let Some(found) = read(format!("{parent}/{first}"), first.clone()).await? {
                return Ok(Some(found));
            }
        }
        Err(unavailable(format!("the holder of {name} kept changing")))
    }

    /// The holder whose node is `path` (named `node`), named as Curator
    /// names it and with its `czxid` as the token; `None` if the node is
    /// gone.
    async fn holder_at(
        &self,
        client: &zk::Client,
        path: &str,
        node: &str,
    ) -> Result<Option<Holder>> {
        let Some(stat) = self
            .call("read a holder", client.check_stat(path))
            .await?
            .map_err(|e| convert("read a holder", e))?
        else {
            return Ok(None);
        };
        let owner = node.strip_prefix(PROTECTED).unwrap_or(node);
        Ok(Some(Holder::new(owner, token(stat.czxid), None)))
    }
}
