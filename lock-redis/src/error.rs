//! Redis client errors → distlock errors: which ones a retry may get past.

use std::time::Duration;

use lock_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// The server did not answer (as opposed to answering with an error).
pub(crate) fn unanswered(e: &RedisError) -> bool {
    // redis-rs would reconnect on a refused password, as on a dropped
    // connection; the same password will be refused again.
    if refused_credentials(e) {
        return false;
    }
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

/// The server refused the URL's user and password (`AUTH` answered
/// `WRONGPASS`, or an error redis-rs reports the same way).
fn refused_credentials(e: &RedisError) -> bool {
    // The cluster client, when no seed node let it in, keeps only the text
    // of the last seed's error under an I/O error of its own.
    let seeds_refused = || {
        e.kind() == ErrorKind::Io
            && e.detail()
                .is_some_and(|d| d.ends_with(&format!("- {:?}", ErrorKind::AuthenticationFailed)))
    };
    e.kind() == ErrorKind::AuthenticationFailed || seeds_refused()
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
    if refused_credentials(&e) {
        return Error::backend(format!(
            "redis {operation} on {server}: {e}: the server refused the URL's user and \
             password (or its password_file's)"
        ))
        .with_source(e);
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

    /// redis-rs would reconnect on a refused password, but the same
    /// password is refused again: the caller hears it at once.
    #[test]
    fn a_refused_password_is_not_retried() {
        let e = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert!(!unanswered(&e));
        let e = convert("127.0.0.1:6379", "connect", Duration::from_secs(1), e);
        assert!(
            matches!(e, Error::Backend { .. }) && !e.is_retryable(),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("refused the URL's user and password"),
            "{e}"
        );

        let seeds = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        let cluster = RedisError::from((
            ErrorKind::Io,
            "Failed to create initial connections",
            seeds.to_string(),
        ));
        assert!(!unanswered(&cluster), "{cluster}");
        let unreachable = RedisError::from((
            ErrorKind::Io,
            "Failed to create initial connections",
            "Connection refused (os error 111)".to_owned(),
        ));
        assert!(unanswered(&unreachable), "{unreachable}");
    }
}
