//! What both Redis test binaries use: a fresh key prefix, a locker for a
//! URL, and acquire options.

use std::time::Duration;

use conformance_tests::targets::fresh_table;
use lock_core::{AcquireOptions, Locker, Wait};

pub(crate) fn prefix() -> String {
    format!("{}:", fresh_table())
}

pub(crate) async fn locker(url: &str) -> Locker {
    Locker::from_arc(distlock::connect_backend(url).await.expect("connect"))
}

pub(crate) fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}
