//! Turning `sqlx` errors into distlock errors that say whether a retry helps.

use std::time::Duration;

use lock_core::Error;
use sqlx::error::DatabaseError;

/// How one dialect reads `sqlx` errors.
#[derive(Debug)]
pub(crate) struct ErrorMap {
    /// The backend's name in messages.
    pub(crate) backend: &'static str,
    /// Whether a database error is a transient condition (lock contention,
    /// a server shutting down) that a retry may get past.
    pub(crate) transient: fn(&dyn DatabaseError) -> bool,
    /// How long a statement waits for a free pooled connection.
    pub(crate) pool_timeout: Duration,
}

impl ErrorMap {
    /// Converts an error from `operation`.
    pub(crate) fn convert(&self, operation: &'static str, e: sqlx::Error) -> Error {
        match e {
            sqlx::Error::Database(db) if (self.transient)(&*db) => Error::Unavailable {
                backend: self.backend,
                message: format!("{operation}: {db}"),
                source: Some(db.into()),
            },
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => Error::Unavailable {
                backend: self.backend,
                message: format!("{operation}: {e}"),
                source: Some(e.into()),
            },
            sqlx::Error::PoolTimedOut => Error::Timeout {
                operation: "waiting for a free database connection",
                after: self.pool_timeout,
            },
            other => Error::Backend {
                message: format!("{} {operation}: {other}", self.backend),
                source: Some(other.into()),
            },
        }
    }
}
