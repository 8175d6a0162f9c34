//! What every call to the database is bounded by: the client's limit on a
//! statement, a second past the server's own, and the TTL as statements
//! bind it.

use std::future::Future;
use std::time::Duration;

use lock_core::backend::millis;
use lock_core::{Error, Result};

/// How much longer than the server's own limit the client waits for a
/// statement, so that the server's definite answer ("stopped, nothing
/// changed") normally comes first.
const CLIENT_MARGIN: Duration = Duration::from_secs(1);

/// How long the client waits for a statement the server stops after
/// `statement_timeout`.
pub(crate) fn client_limit(statement_timeout: Duration) -> Duration {
    statement_timeout + CLIENT_MARGIN
}

/// Runs `statement` for at most `limit`.
pub(crate) async fn within<T>(
    limit: Duration,
    operation: &'static str,
    statement: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, statement)
        .await
        .unwrap_or(Err(Error::timeout(operation, limit)))
}

/// `ttl` in whole milliseconds as the `BIGINT` the statements bind.
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    // TTLs are bounded by the capabilities long before this could saturate.
    i64::try_from(millis(ttl)).unwrap_or(i64::MAX)
}
