//! What every case uses: fresh names, a client of the target, TTLs and
//! waits sized for the backend, and the common assertions.

use std::time::Duration;

use lock_core::backend::{AcquireRequest, Lease};
use lock_core::{AcquireOptions, Error, Locker, Wait};
use rand::Rng;
use tokio::time::Instant;

use crate::Target;

/// A lock name no other test uses.
pub(super) fn unique(case: &str) -> String {
    format!("{case}-{:08x}", rand::rng().random::<u32>())
}

pub(super) async fn locker(t: &dyn Target) -> Locker {
    Locker::from_arc(t.client().await)
}

/// The shortest TTL worth testing expiry with on this backend.
pub(super) fn short_ttl(l: &Locker) -> Duration {
    l.capabilities().min_ttl.max(Duration::from_millis(400))
}

/// A wait long enough for any short-TTL lease to run out, with room to spare.
pub(super) fn patient(ttl: Duration) -> Wait {
    Wait::For(ttl * 10 + Duration::from_secs(10))
}

pub(super) fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}

pub(super) fn assert_not_held<T: std::fmt::Debug>(what: &str, r: lock_core::Result<T>) {
    match r {
        Err(Error::NotHeld { .. }) => {}
        other => panic!("{what}: expected NotHeld, got {other:?}"),
    }
}

/// `lease` as a stranger would forge it: the same name, kind and token,
/// another owner.
pub(super) fn forged(lease: &Lease) -> Lease {
    let req = AcquireRequest::new(lease.name().clone(), lease.ttl()).with_kind(lease.kind());
    let forged = Lease::granted(&req, lease.token(), Instant::now());
    match lease.slot() {
        Some(slot) => forged.with_slot(slot),
        None => forged,
    }
}

pub(super) fn assert_increasing(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fencing tokens must strictly increase: {tokens:?}"
        );
    }
}
