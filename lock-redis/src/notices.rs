//! Release notices published by the release script, which wake a local
//! waiter of that name, and an election's notices, which wake its
//! observers: on one server, the backend's one subscription connection;
//! in a cluster, shard channels subscribed while somebody waits or
//! observes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::backend::{Admissions, Admitted, OwnerToken, ReleaseSignals, WaitBudget};
use lock_core::{FencingToken, LockName};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use crate::keys::Notice;
use crate::node::{Keys, SubscribeTo};

/// Whom notices wake: the local waiters for a lock (one for a release,
/// every one for a release that may admit many), and the local observers
/// of an election (all of them, for every change of its leader).
#[derive(Debug, Default)]
pub(crate) struct Wakers {
    pub(crate) waiters: ReleaseSignals,
    pub(crate) observers: ReleaseSignals,
    /// The local waiters a release may admit, told by the release itself
    /// when it was sent from here, else by its notice.
    pub(crate) admissions: Arc<Admissions>,
    /// Whether this backend's waiters register to be admitted (not while
    /// grants are confirmed on replicas).
    pub(crate) admitted: bool,
}

impl Wakers {
    /// For a backend whose waiters are admitted by releases, or not.
    pub(crate) fn new(admitted: bool) -> Self {
        Self {
            admitted,
            ..Self::default()
        }
    }
}

/// Pause before subscribing again after the connection was lost. Notices
/// published meanwhile are lost; the waiters' safety-net polling covers them.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(200);

/// Forwards every notice on `channel` to `wakers`, reconnecting for ever
/// (the task is aborted with its backend).
pub(crate) async fn forward(
    to: SubscribeTo,
    channel: String,
    connect_timeout: Duration,
    wakers: Arc<Wakers>,
) {
    loop {
        // Asked again each time: under Sentinel, the master may have moved.
        let client = match to.client().await {
            Ok(client) => client,
            Err(e) => {
                tracing::debug!(%channel, error = %e, "no server to subscribe to releases on");
                tokio::time::sleep(RESUBSCRIBE_AFTER).await;
                continue;
            }
        };
        let subscribed = tokio::time::timeout(connect_timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        match subscribed {
            Ok(Ok(mut pubsub)) => {
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    if let Ok(notice) = message.get_payload::<String>() {
                        deliver(&wakers, &notice);
                    }
                }
                tracing::debug!(%channel, "release subscription ended; subscribing again");
            }
            Ok(Err(e)) => tracing::debug!(%channel, error = %e, "cannot subscribe to releases"),
            Err(_) => tracing::debug!(%channel, "subscribing to releases timed out"),
        }
        tokio::time::sleep(RESUBSCRIBE_AFTER).await;
    }
}

/// Wakes whom a notice names (see [`Notice`]): one waiter of the name, or
/// every one (a read-write lock's release, which may admit many readers);
/// an election's observers, and for a leader gone one waiting candidate.
/// Anything else is ignored.
///
/// A notice of a release that admitted waiters names them with their
/// tokens: this process's are handed their grants, and nobody else is
/// woken, since the release admitted everyone its removal let in who
/// waits to be admitted. Waiters that do not register (grants confirmed on
/// replicas) are woken all the same.
fn deliver(wakers: &Wakers, payload: &str) {
    let (head, admitted) = payload.split_once(' ').unwrap_or((payload, ""));
    let (notice, name) = Notice::parse(head);
    let Ok(name) = LockName::new(name) else {
        return;
    };
    if !admitted.is_empty() {
        for (owner, token) in admitted.split(' ').filter_map(|a| a.split_once('=')) {
            let (Ok(owner), Ok(token)) = (OwnerToken::from_hex(owner), token.parse()) else {
                continue;
            };
            let token = FencingToken::new(token);
            wakers.admissions.admit(
                owner,
                Admitted {
                    token,
                    sent_at: None,
                },
            );
        }
        if wakers.admitted {
            return;
        }
    }
    match notice {
        Notice::Released => wakers.waiters.notify(&name),
        Notice::ReleasedAll => wakers.waiters.notify_all(&name),
        Notice::Elected => wakers.observers.notify_all(&name),
        Notice::Resigned => {
            wakers.waiters.notify(&name);
            wakers.observers.notify_all(&name);
        }
    }
}

/// A cluster's release notices: a shard channel per lock name
/// ([`Keys::release_channel`](crate::node::Keys::release_channel)), which
/// this backend subscribes to only while a local waiter waits for that
/// name, or observes its election. Notices reach only the nodes serving
/// the lock's slot, and only the clients waiting for it. redis-rs's
/// cluster connection sends each `SSUBSCRIBE` to the slot's node and
/// subscribes again after a reconnect or a failover; the pushes come back
/// on one channel.
pub(crate) struct Sharded {
    conn: ClusterConnection,
    /// Local waiters and observers per name, and whether the name's channel is
    /// subscribed. Counted at once, before any request, so that a watch
    /// dropped half-way is uncounted by its [`Watching`].
    waiters: Mutex<HashMap<LockName, Waiters>>,
    /// Held while a subscription is made or dropped, so that the last
    /// waiter's unsubscribe and the next waiter's subscribe reach the server
    /// in that order.
    commands: tokio::sync::Mutex<()>,
    keys: Keys,
    timeout: Duration,
    reader: JoinHandle<()>,
}

#[derive(Default)]
struct Waiters {
    count: usize,
    subscribed: bool,
}

impl Sharded {
    /// Subscribes through a RESP3 cluster connection of `client` (made with
    /// `push_sender`), whose pushes arrive on `pushes`.
    pub(crate) fn new(
        conn: ClusterConnection,
        mut pushes: UnboundedReceiver<PushInfo>,
        keys: Keys,
        timeout: Duration,
        wakers: Arc<Wakers>,
    ) -> Self {
        let reader = tokio::spawn(async move {
            while let Some(push) = pushes.recv().await {
                if push.kind != PushKind::SMessage {
                    continue;
                }
                let notice = push
                    .data
                    .get(1)
                    .and_then(|payload| redis::from_redis_value_ref::<String>(payload).ok());
                if let Some(notice) = notice {
                    deliver(&wakers, &notice);
                }
            }
        });
        Self {
            conn,
            waiters: Mutex::new(HashMap::new()),
            commands: tokio::sync::Mutex::new(()),
            keys,
            timeout,
            reader,
        }
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, Waiters>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribes to `name`'s releases until the result is dropped; the
    /// subscription is confirmed when this returns, unless `budget` ran out
    /// first. A failure only costs the waiter its wake-ups (it still
    /// polls), so it is logged, not returned, and the next watch of the
    /// name tries again.
    pub(crate) async fn watch(self: &Arc<Self>, name: &LockName, budget: &WaitBudget) -> Watching {
        let watching = self.count(name);
        budget.race(self.subscribe(name)).await;
        watching
    }

    /// The same for an observer of `name`'s election, which gives the
    /// subscription `within` at most.
    pub(crate) async fn observe(self: &Arc<Self>, name: &LockName, within: Duration) -> Watching {
        let watching = self.count(name);
        let _ = tokio::time::timeout(within, self.subscribe(name)).await;
        watching
    }

    /// Counts one more watch of `name`, at once, before any request, so
    /// that a watch dropped half-way is uncounted by its [`Watching`].
    fn count(self: &Arc<Self>, name: &LockName) -> Watching {
        self.waiters().entry(name.clone()).or_default().count += 1;
        Watching {
            sharded: self.clone(),
            name: Some(name.clone()),
        }
    }

    async fn subscribe(&self, name: &LockName) {
        let _commands = self.commands.lock().await;
        if self.waiters().get(name).is_none_or(|w| w.subscribed) {
            return;
        }
        let (channel, _) = self.keys.release_channel(name);
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, conn.ssubscribe(&channel)).await {
            Ok(Ok(())) => {
                if let Some(w) = self.waiters().get_mut(name) {
                    w.subscribed = true;
                }
            }
            Ok(Err(e)) => tracing::debug!(%channel, error = %e, "cannot subscribe to releases"),
            Err(_) => tracing::debug!(%channel, "subscribing to releases timed out"),
        }
    }

    async fn unwatch(&self, name: LockName) {
        let _commands = self.commands.lock().await;
        let subscribed = {
            let mut waiters = self.waiters();
            let Some(w) = waiters.get_mut(&name) else {
                return;
            };
            w.count -= 1;
            if w.count > 0 {
                return;
            }
            waiters.remove(&name).is_some_and(|w| w.subscribed)
        };
        if !subscribed {
            return;
        }
        let (channel, _) = self.keys.release_channel(&name);
        let mut conn = self.conn.clone();
        if let Ok(Err(e)) = tokio::time::timeout(self.timeout, conn.sunsubscribe(&channel)).await {
            tracing::debug!(%channel, error = %e, "cannot unsubscribe from releases");
        }
    }
}

impl std::fmt::Debug for Sharded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharded")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl Drop for Sharded {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A waiter's subscription to one name's releases.
pub(crate) struct Watching {
    sharded: Arc<Sharded>,
    name: Option<LockName>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let (Some(name), Ok(runtime)) = (self.name.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let sharded = self.sharded.clone();
        runtime.spawn(async move { sharded.unwatch(name).await });
    }
}
