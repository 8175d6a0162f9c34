//! What the Redis failover test binaries share: retrying a call while a
//! failover settles, and waiting for a grant across one.

use std::time::Duration;

use tokio::time::{Instant, sleep};

/// What a failover may take here: a few seconds, with room for a loaded
/// machine.
pub(crate) const FAILOVER_BOUND: Duration = Duration::from_secs(40);

/// Retries `op` until it succeeds or the failover bound passes: right after
/// a failover the first requests may still meet the old topology.
pub(crate) async fn eventually<T>(
    what: &str,
    mut op: impl AsyncFnMut() -> distlock::Result<T>,
) -> T {
    let deadline = Instant::now() + FAILOVER_BOUND;
    loop {
        match op().await {
            Ok(out) => return out,
            Err(_) if Instant::now() < deadline => sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("{what}: still failing after {FAILOVER_BOUND:?}: {e}"),
        }
    }
}

/// Tries `op` (one attempt at a lock) until it grants, through errors and
/// refusals, for the failover bound and `held` more (a lease that must run
/// out on the promoted replica first).
pub(crate) async fn granted<T>(
    what: &str,
    held: Duration,
    mut op: impl AsyncFnMut() -> distlock::Result<Option<T>>,
) -> T {
    let deadline = Instant::now() + FAILOVER_BOUND + held;
    loop {
        let outcome = op().await;
        if let Ok(Some(out)) = outcome {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not granted after {:?}; last: {:?}",
            FAILOVER_BOUND + held,
            outcome.err()
        );
        sleep(Duration::from_millis(50)).await;
    }
}
