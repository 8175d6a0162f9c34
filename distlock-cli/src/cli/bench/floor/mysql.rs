//! The floor of `mysql://` and `mariadb://`: the bare
//! `INSERT … ON DUPLICATE KEY UPDATE` that takes a free or expired row and
//! reports the new version through `LAST_INSERT_ID(expr)` (as lock-sql's
//! `mysql.rs` does, there being no `RETURNING`), and the bare update that
//! frees it, with the same pool settings, in a table of its own.

use std::str::FromStr;

use distlock::{Error, Result};
use sqlx::mysql::{MySql, MySqlConnectOptions};

use super::primitive::base_url;
use super::sql::{SqlFloor, Statements, config};

const SQL: Statements = Statements {
    create: "CREATE TABLE IF NOT EXISTS distlock_bench_floor (
    name VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    version BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
) ENGINE = InnoDB",
    // The database's clock in milliseconds, as lock-sql reads it. `SET`
    // assignments run left to right, each seeing the ones before: `version` and
    // `owner` test the old row; `expires_at` then sees our owner exactly when
    // the row was takeable (owners are random per acquisition).
    acquire: "INSERT INTO distlock_bench_floor (name, owner, version, expires_at)
    VALUES (?, ?, LAST_INSERT_ID(1), CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ?)
    ON DUPLICATE KEY UPDATE
        version = IF(owner IS NULL OR expires_at <= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
                     LAST_INSERT_ID(version + 1), version + LAST_INSERT_ID(0)),
        owner = IF(owner IS NULL OR expires_at <= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
                   VALUES(owner), owner),
        expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)",
    release: "UPDATE distlock_bench_floor SET owner = NULL
    WHERE name = ? AND owner = ? AND version = ?",
};

/// A pool on the library's database.
pub(super) type MySqlFloor = SqlFloor<MySql>;

impl SqlFloor<MySql> {
    /// Connects as lock-sql connects for the same URL.
    pub(super) async fn open(url: &str) -> Result<Self> {
        let common = config(url)?;
        // sqlx knows the `mysql` scheme only; both name the same protocol.
        let base = base_url(url);
        let base = base
            .strip_prefix("mariadb:")
            .map_or_else(|| base.to_owned(), |rest| format!("mysql:{rest}"));
        let options = MySqlConnectOptions::from_str(&base)
            .map_err(|e| Error::invalid_url(url, e.to_string()))?;
        let describe = "sqlx MySqlPool as lock-sql opens it: INSERT … ON DUPLICATE KEY UPDATE … \
                        LAST_INSERT_ID(version + 1) if free or expired, then UPDATE … SET owner = \
                        NULL WHERE owner and version match";
        Self::open_with("mysql", &common, options, SQL, describe.to_owned()).await
    }
}
