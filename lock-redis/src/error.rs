//! Redis client errors → distlock errors: which ones a retry may get past.

use std::time::Duration;

use lock_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// The server did not answer (as opposed to answering with an error).
pub(crate) fn unanswered(e: &RedisError) -> bool {
    e.is_timeout()
        || e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

/// The server answered that it cannot serve yet and ran nothing: it is
/// loading its data after a restart (`LOADING`), a cluster slot or a
/// master is briefly missing (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`).
fn not_serving_yet(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        )
    )
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
    if unanswered(&e) || not_serving_yet(&e) {
        return Error::unavailable(crate::NAME, format!("{operation} on {server}: {e}"))
            .with_source(e);
    }
    Error::backend(format!("redis {operation} on {server}: {e}")).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(reply: &str) -> RedisError {
        match redis::parse_redis_value(reply.as_bytes()) {
            Ok(redis::Value::ServerError(e)) => e.into(),
            other => panic!("{reply:?} parsed as {other:?}"),
        }
    }

    /// A lock() that waits across a restart keeps waiting while the server
    /// loads its data, instead of failing as if the server had refused.
    #[test]
    fn a_server_still_loading_is_unavailable_not_an_error() {
        for reply in [
            "-LOADING Redis is loading the dataset in memory\r\n",
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
            "-MASTERDOWN Link with MASTER is down\r\n",
        ] {
            let e = convert(
                "127.0.0.1:6379",
                "acquire",
                Duration::from_secs(1),
                server_error(reply),
            );
            assert!(
                matches!(e, Error::Unavailable { .. }) && e.is_retryable(),
                "{reply:?} gave {e:?}"
            );
        }
        let refused = convert(
            "127.0.0.1:6379",
            "acquire",
            Duration::from_secs(1),
            server_error("-NOPERM this user has no permissions to run the 'eval' command\r\n"),
        );
        assert!(!refused.is_retryable(), "{refused:?}");
    }
}
