//! What etcd's two waiting RPCs (`Lock`, `Campaign`) share as peers: a
//! request the server answers only once the caller's turn comes, on a lease
//! of the caller's own.

use std::future::Future;
use std::time::Instant;

use distlock::Result;
use etcd_client::Client;

use crate::cli::bench::floor::etcd::convert;

/// How a wait on the server ended.
pub(super) enum Waited<T> {
    Granted(T),
    /// The request failed in a way a retry may get past (the client's own
    /// request timeout cuts a long wait short) while time remains: ask
    /// again on a new lease, as a user of `etcdctl` would.
    Again,
    /// Out of time.
    TimedOut,
}

/// Waits for `call` on `lease` until `until`. A wait that does not end in
/// a grant revokes the lease, which deletes the caller's key in the queue.
pub(super) async fn on_lease<T>(
    client: &Client,
    lease: i64,
    until: Instant,
    what: &'static str,
    call: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
) -> Result<Waited<T>> {
    let outcome = tokio::time::timeout_at(until.into(), call).await;
    if let Ok(Ok(granted)) = outcome {
        return Ok(Waited::Granted(granted));
    }
    client
        .clone()
        .lease_revoke(lease)
        .await
        .map_err(|e| convert("revoke a lease", e))?;
    match outcome {
        Ok(Err(e)) => {
            let e = convert(what, e);
            if e.is_retryable() && Instant::now() < until {
                Ok(Waited::Again)
            } else if e.is_retryable() {
                Ok(Waited::TimedOut)
            } else {
                Err(e)
            }
        }
        _ => Ok(Waited::TimedOut),
    }
}
