//! The one subscription connection of a backend: release notices published
//! by the release script wake a local waiter of that name.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::LockName;
use lock_core::backend::ReleaseSignals;
use redis::Client;

/// Pause before subscribing again after the connection was lost. Notices
/// published meanwhile are lost; the waiters' safety-net polling covers them.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(200);

/// Forwards every notice on `channel` to `signals`, reconnecting for ever
/// (the task is aborted with its backend).
pub(crate) async fn forward(
    client: Client,
    channel: String,
    connect_timeout: Duration,
    signals: Arc<ReleaseSignals>,
) {
    loop {
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
