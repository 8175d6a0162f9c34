//! Who holds a lock, read from its keys by the rules that admit them: the
//! mutex's (and the election's) oldest key; a permit's lease key among the
//! `N` oldest (`semaphore.rs`); a writer's key first of the read-write
//! lock's keys, or readers' keys before its first writer's (`layout.rs`).

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};
use lock_core::backend::Family;
use lock_core::backend::Holder;
use lock_core::{FencingToken, LockKind, LockName, Result};

use crate::layout::{Entry, Layout};
use crate::queue::Queue;

impl Queue {
    /// Who holds `kind`'s lock of `name`: the oldest key of the mutex's
    /// range (which is also the election's), or the holders of a semaphore
    /// or read-write lock.
    pub(crate) async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        if !matches!(kind.family(), Family::Mutex | Family::Election) {
            return self.group_holders(name, kind).await;
        }
        let Some(kv) = self.first_in_line(name).await?.0 else {
            return Ok(Vec::new());
        };
        let lease = kv.lease();
        let ttl = self.core.lease_left(lease).await;
        let entry = Entry::of(&kv);
        // Taken by a client that stores no owner token: name it by its lease.
        let owner = entry.owner.unwrap_or_else(|| format!("{lease:x}"));
        let token = FencingToken::from_i64(kv.create_revision());
        Ok(vec![
            Holder::new(&owner, token, ttl).of_kind(entry.kind.unwrap_or(kind)),
        ])
    }

    /// The oldest key of `name`'s mutex range, the holder's (the
    /// leader's), if any, and the store's revision when it was read.
    pub(crate) async fn first_in_line(&self, name: &LockName) -> Result<(Option<KeyValue>, i64)> {
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let dir = self.layout.dir(name);
        let found = self
            .core
            .call("find the holder", |mut c| async move {
                c.get(dir, Some(first)).await
            })
            .await?;
        let revision = found.header().map_or(0, |h| h.revision());
        Ok((found.kvs().first().cloned(), revision))
    }

    /// Every holder of `kind`'s semaphore or read-write lock of `name`.
    async fn group_holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        let (range, permits) = match kind {
            LockKind::Permit { permits } => (self.layout.leases_dir(name), permits as usize),
            _ => (self.layout.family_dir(name, Family::ReadWrite), usize::MAX),
        };
        let by_age = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let found = self
            .core
            .call("find the holders", |mut c| async move {
                c.get(range, Some(by_age)).await
            })
            .await?;
        let held: Vec<(&KeyValue, LockKind)> = match kind {
            LockKind::Permit { .. } => found
                .kvs()
                .iter()
                .take(permits)
                .map(|kv| (kv, kind))
                .collect(),
            _ => readers_or_writer(found.kvs(), &range_of(&self.layout, name)),
        };
        let mut left: HashMap<i64, Option<Duration>> = HashMap::new();
        let mut holders = Vec::with_capacity(held.len());
        for (kv, side) in held {
            let lease = kv.lease();
            if let std::collections::hash_map::Entry::Vacant(entry) = left.entry(lease) {
                entry.insert(self.core.lease_left(lease).await);
            }
            let owner = kv.value_str().unwrap_or_default();
            let token = FencingToken::from_i64(kv.create_revision());
            holders.push(Holder::new(owner, token, left[&lease]).of_kind(side));
        }
        Ok(holders)
    }
}

/// The key range of `name`'s read-write lock.
fn range_of(layout: &Layout, name: &LockName) -> String {
    layout.family_dir(name, Family::ReadWrite)
}

/// The holders among the keys of the read-write lock whose range is
/// `range`, oldest first: the writer if its key is the oldest, else every
/// reader older than the oldest writer.
fn readers_or_writer<'a>(keys: &'a [KeyValue], range: &str) -> Vec<(&'a KeyValue, LockKind)> {
    let is_write = |kv: &KeyValue| {
        kv.key_str().is_ok_and(|k| {
            k.strip_prefix(range)
                .is_some_and(|part| part.starts_with("write/"))
        })
    };
    match keys.first() {
        Some(first) if is_write(first) => vec![(first, LockKind::Write)],
        _ => keys
            .iter()
            .take_while(|kv| !is_write(kv))
            .map(|kv| (kv, LockKind::Read))
            .collect(),
    }
}
