//! Redis client errors → distlock errors: which ones a retry may get past.

use std::time::Duration;

use lock_core::Error;
use redis::RedisError;

/// The server did not answer (as opposed to answering with an error).
pub(crate) fn unanswered(e: &RedisError) -> bool {
    e.is_timeout()
        || e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

/// A Redis error as a distlock error that says whether a retry can help.
pub(crate) fn convert(
    server: &str,
    operation: &'static str,
    limit: Duration,
    e: RedisError,
) -> Error {
    if e.is_timeout() {
        tracing::debug!(server, operation, error = %e, "redis did not answer in time");
        return Error::timeout(operation, limit);
    }
    if unanswered(&e) {
        return Error::Unavailable {
            backend: crate::NAME,
            message: format!("{operation} on {server}: {e}"),
            source: Some(e.into()),
        };
    }
    Error::Backend {
        message: format!("redis {operation} on {server}: {e}"),
        source: Some(e.into()),
    }
}
