//! Who holds a semaphore or a read-write lock, read from its keys by the
//! rules that admit them: a permit's lease key among the `N` oldest
//! (`semaphore.rs`); a writer's key first of the read-write lock's keys, or
//! readers' keys before its first writer's (`layout.rs`).

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};
use lock_core::backend::Holder;
use lock_core::{Family, FencingToken, LockKind, LockName, Result};

use crate::backend::EtcdBackend;

impl EtcdBackend {
    /// Every holder of `kind`'s semaphore or read-write lock of `name`.
    pub(crate) async fn group_holders(
        &self,
        name: &LockName,
        kind: LockKind,
    ) -> Result<Vec<Holder>> {
        let (range, permits) = match kind {
            LockKind::Permit { permits } => (self.leases_dir(name), permits as usize),
            _ => (self.family_dir(name, Family::ReadWrite), usize::MAX),
        };
        let by_age = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let found = self
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
            _ => readers_or_writer(found.kvs(), &range_of(self, name)),
        };
        let mut left: HashMap<i64, Option<Duration>> = HashMap::new();
        let mut holders = Vec::with_capacity(held.len());
        for (kv, side) in held {
            let lease = kv.lease();
            if let std::collections::hash_map::Entry::Vacant(entry) = left.entry(lease) {
                entry.insert(self.lease_left(lease).await);
            }
            let owner = kv.value_str().unwrap_or_default();
            let token = FencingToken::from_i64(kv.create_revision());
            holders.push(Holder::new(owner, token, left[&lease]).of_kind(side));
        }
        Ok(holders)
    }

    /// The time left on `lease`, if etcd says.
    pub(crate) async fn lease_left(&self, lease: i64) -> Option<Duration> {
        self.call("read the lease", |mut c| async move {
            c.lease_time_to_live(lease, None).await
        })
        .await
        .ok()
        .map(|t| Duration::from_secs(u64::try_from(t.ttl()).unwrap_or(0)))
    }
}

/// The key range of `name`'s read-write lock.
fn range_of(backend: &EtcdBackend, name: &LockName) -> String {
    backend.family_dir(name, Family::ReadWrite)
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
