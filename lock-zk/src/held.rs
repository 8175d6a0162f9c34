//! What this backend keeps of each lease it granted: the record that
//! renewals move and the expiry task (`expiry.rs`) reads.

use std::time::Duration;

use lock_core::LockKind;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One lease this backend granted and keeps.
pub(crate) struct Held {
    pub(crate) kind: LockKind,
    pub(crate) path: String,
    pub(crate) session: i64,
    pub(crate) czxid: i64,
    /// The lease TTL last granted.
    pub(crate) ttl: Duration,
    /// When the node is deleted unless renewed.
    pub(crate) until: watch::Sender<Instant>,
    /// Set by the expiry task before it deletes the node.
    pub(crate) expired: bool,
    pub(crate) stop: CancellationToken,
}
