//! Release notices published by the release script, which wake a local
//! waiter of that name: on one server, the backend's one subscription
//! connection; in a cluster, shard channels subscribed while somebody
//! waits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::LockName;
use lock_core::backend::ReleaseSignals;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use crate::node::{Keys, SubscribeTo};

/// Pause before subscribing again after the connection was lost. Notices
/// published meanwhile are lost; the waiters' safety-net polling covers them.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(200);

/// Forwards every notice on `channel` to `signals`, reconnecting for ever
/// (the task is aborted with its backend).
pub(crate) async fn forward(
    to: SubscribeTo,
    channel: String,
    connect_timeout: Duration,
    signals: Arc<ReleaseSignals>,
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
                    if let Some(name) = message
                        .get_payload::<String>()
                        .ok()
                        .and_then(|n| LockName::new(n).ok())
                    {
                        signals.notify(&name);
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

/// A cluster's release notices: a shard channel per lock name
/// ([`Keys::release_channel`](crate::node::Keys::release_channel)), which
/// this backend subscribes to only while a local waiter waits for that
/// name. Notices reach only the nodes serving the lock's slot, and only
/// the clients waiting for it. redis-rs's cluster connection sends each
/// `SSUBSCRIBE` to the slot's node and subscribes again after a reconnect
/// or a failover; the pushes come back on one channel.
pub(crate) struct Sharded {
    conn: ClusterConnection,
    /// Local waiters per subscribed name. Changed, and the subscriptions
    /// with it, under this lock, so that a subscription dropped by the last
    /// waiter and made again by the next go to the server in that order.
    waiters: tokio::sync::Mutex<HashMap<LockName, usize>>,
    keys: Keys,
    timeout: Duration,
    reader: JoinHandle<()>,
}

impl Sharded {
    /// Subscribes through a RESP3 cluster connection of `client` (made with
    /// `push_sender`), whose pushes arrive on `pushes`.
    pub(crate) fn new(
        conn: ClusterConnection,
        mut pushes: UnboundedReceiver<PushInfo>,
        keys: Keys,
        timeout: Duration,
        signals: Arc<ReleaseSignals>,
    ) -> Self {
        let reader = tokio::spawn(async move {
            while let Some(push) = pushes.recv().await {
                if push.kind != PushKind::SMessage {
                    continue;
                }
                let name = push
                    .data
                    .get(1)
                    .and_then(|payload| redis::from_redis_value_ref::<String>(payload).ok())
                    .and_then(|n| LockName::new(n).ok());
                if let Some(name) = name {
                    signals.notify(&name);
                }
            }
        });
        Self {
            conn,
            waiters: tokio::sync::Mutex::new(HashMap::new()),
            keys,
            timeout,
            reader,
        }
    }

    /// Subscribes to `name`'s releases until the result is dropped. The
    /// subscription is confirmed when this returns; a failure only costs
    /// the waiter its wake-ups (it still polls), so it is logged, not
    /// returned.
    pub(crate) async fn watch(self: &Arc<Self>, name: &LockName) -> Watching {
        let mut waiters = self.waiters.lock().await;
        let count = waiters.entry(name.clone()).or_insert(0);
        *count += 1;
        if *count == 1 {
            let (channel, _) = self.keys.release_channel(name);
            let mut conn = self.conn.clone();
            match tokio::time::timeout(self.timeout, conn.ssubscribe(&channel)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%channel, error = %e, "cannot subscribe to releases"),
                Err(_) => tracing::debug!(%channel, "subscribing to releases timed out"),
            }
        }
        Watching {
            sharded: self.clone(),
            name: Some(name.clone()),
        }
    }

    async fn unwatch(&self, name: LockName) {
        let mut waiters = self.waiters.lock().await;
        let Some(count) = waiters.get_mut(&name) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        waiters.remove(&name);
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
