//! Who holds a semaphore or a read-write lock, read from its nodes by the
//! rules that admit them (Curator's): the `N` oldest of a semaphore's
//! leases; a read-write lock's nodes that `Queue::blocker` lets through.

use lock_core::backend::Holder;
use lock_core::{LockKind, LockName, Result};

use crate::backend::ZkBackend;
use crate::error::convert;
use crate::expiry::token;
use crate::layout::{PROTECTED, Queue};

impl ZkBackend {
    /// Every holder of `kind`'s semaphore or read-write lock of `name`.
    pub(crate) async fn group_holders(
        &self,
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
            let Some(stat) = self
                .call("read a holder", client.check_stat(&path))
                .await?
                .map_err(|e| convert("read a holder", e))?
            else {
                continue; // released in between
            };
            let owner = node.strip_prefix(PROTECTED).unwrap_or(node);
            holders.push(Holder::new(owner, token(stat.czxid), None).of_kind(side));
        }
        Ok(holders)
    }
}
