//! Elections as etcd's own `concurrency.Election` (behind `etcdctl
//! elect`) keeps them: a candidate is a key in the mutex's range whose
//! value is what it proclaims (`layout.rs`), so campaigning, renewing and
//! resigning are the mutex's queue; the leader is the oldest key, and its
//! create revision the term. Added here: a new value for the leader's key
//! (`Proclaim`), reading the oldest key (`Leader`), and a watch for
//! observers (`Observe`).

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, KeyValue, PutOptions, Txn, TxnOp, WatchOptions, WatchStream,
};
use lock_core::backend::{Leader, Lease};
use lock_core::{Error, FencingToken, LockKind, LockName, Result};

use crate::client::next_message;
use crate::layout::Entry;
use crate::queue::Queue;

const WATCH: &str = "watch the election";

impl Queue {
    /// Puts `value` on the leader's key if its create revision is still
    /// the lease's term: one `Txn`, which keeps the key's lease (and so
    /// its session) and its create revision.
    pub(crate) async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        if lease.kind() != LockKind::Leader {
            // A mutex's key holds its owner token, which its deletes check.
            return Err(Error::not_held(lease.name()));
        }
        let key = self
            .layout
            .held_key(lease.name(), lease.owner(), lease.kind());
        let term = lease.token().to_i64();
        let put = PutOptions::new().with_ignore_lease();
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                term,
            )])
            .and_then([TxnOp::put(key.as_str(), value, Some(put))]);
        let response = self
            .core
            .call("proclaim", |mut c| async move { c.txn(txn).await })
            .await?;
        if response.succeeded() {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    /// The oldest key of the election's range as its leader, with the time
    /// left on its lease (one more request).
    pub(crate) async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let Some(kv) = self.first_in_line(name).await?.0 else {
            return Ok(None);
        };
        let left = match kv.lease() {
            0 => None,
            lease => self.core.lease_left(lease).await,
        };
        Ok(Some(leader_of(&kv, left)))
    }

    /// Waits, within `within`, for a change of the leader from `seen`.
    pub(crate) async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        tokio::time::timeout(within, self.change(name, seen))
            .await
            .unwrap_or(Ok(()))
    }

    /// A watch of the range from now, then a read: if the leader is still
    /// `seen`, the first event after the read that can change it, on the
    /// leader's key (a proclaim, a resign, an expiry) or, while nobody
    /// leads, any new key. A waiter joining or leaving wakes nobody.
    async fn change(&self, name: &LockName, seen: Option<&Leader>) -> Result<()> {
        let range = self.layout.dir(name).into_bytes();
        let options = WatchOptions::new().with_prefix();
        let (mut stream, _) = self
            .core
            .watch_from_now(WATCH, range, Some(options))
            .await?;
        let (first, read_at) = self.first_in_line(name).await?;
        let now = first.as_ref().map(|kv| leader_of(kv, None));
        if !Leader::unchanged(seen, now.as_ref()) {
            return Ok(());
        }
        let leader_key = first.as_ref().map(KeyValue::key);
        loop {
            let events = next(&mut stream).await?;
            let changed = events.iter().any(|(kind, kv)| {
                kv.mod_revision() > read_at
                    && match leader_key {
                        Some(key) => kv.key() == key,
                        None => *kind == EventType::Put,
                    }
            });
            if changed {
                return Ok(());
            }
        }
    }
}

/// The leader `kv` names: its term the key's create revision, its owner
/// the candidate (or mutex holder) of distlock's whose key it is, empty
/// for another client's (`etcdctl elect`'s).
fn leader_of(kv: &KeyValue, left: Option<Duration>) -> Leader {
    let entry = Entry::of(kv);
    let term = FencingToken::from_i64(kv.create_revision());
    Leader::new(&entry.owner.unwrap_or_default(), entry.value, term, left)
}

/// The events of the watch's next message.
async fn next(stream: &mut WatchStream) -> Result<Vec<(EventType, KeyValue)>> {
    let message = next_message(stream, WATCH).await?;
    Ok(message
        .events()
        .iter()
        .filter_map(|e| Some((e.event_type(), e.kv()?.clone())))
        .collect())
}
