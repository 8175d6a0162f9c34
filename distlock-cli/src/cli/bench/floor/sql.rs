//! What the SQL floors share: the row a grant took, the TTL as their
//! statements bind it, what a release's affected-row count means, and their
//! errors.

use std::time::Duration;

use distlock::{Error, Result};

use super::primitive::floor_error;

/// A row taken by an owner at a version.
pub(super) struct SqlGrant {
    pub(super) name: String,
    pub(super) owner: String,
    pub(super) version: i64,
}

impl SqlGrant {
    /// The outcome of a release `UPDATE` that matched `rows` rows: one if
    /// the grant was still ours.
    pub(super) fn released(&self, rows: u64) -> Result<()> {
        if rows == 1 {
            Ok(())
        } else {
            Err(Error::not_held(self.name.clone()))
        }
    }
}

/// The TTL in whole milliseconds, as every dialect's acquire binds it.
pub(super) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// Errors lock-sql would retry are retried here too; anything else ends the
/// run.
pub(super) fn convert(backend: &'static str, operation: &str, e: sqlx::Error) -> Error {
    floor_error(
        backend,
        operation,
        distlock::backends::sql::is_transient(&e),
        e,
    )
}
