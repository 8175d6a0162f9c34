//! The floor of `postgres://`: the bare upsert that takes a free or expired
//! row and the bare update that frees it, on the same database, with the
//! same pool settings lock-sql's `postgres.rs` uses (pool size, no ping
//! before each statement, `statement_timeout`), in a table of its own. No
//! `LISTEN`, no `pg_notify`.

use std::str::FromStr;

use distlock::{Error, Result};
use sqlx::postgres::{PgConnectOptions, Postgres};

use super::primitive::base_url;
use super::sql::{SqlFloor, Statements, config};

const SQL: Statements = Statements {
    create: "CREATE TABLE IF NOT EXISTS distlock_bench_floor (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    owner CHAR(32),
    version BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
)",
    acquire: "INSERT INTO distlock_bench_floor AS l (name, owner, version, expires_at)
    VALUES ($1, $2, 1, now() + $3::BIGINT * INTERVAL '1 millisecond')
    ON CONFLICT (name) DO UPDATE SET
        version = l.version + 1,
        owner = EXCLUDED.owner,
        expires_at = EXCLUDED.expires_at
    WHERE l.owner IS NULL OR l.expires_at <= now()
    RETURNING version",
    release: "UPDATE distlock_bench_floor SET owner = NULL
    WHERE name = $1 AND owner = $2 AND version = $3",
};

/// A pool on the library's database.
pub(super) type PostgresFloor = SqlFloor<Postgres>;

impl SqlFloor<Postgres> {
    /// Connects as lock-sql connects for the same URL.
    pub(super) async fn open(url: &str) -> Result<Self> {
        let common = config(url)?;
        let options = PgConnectOptions::from_str(base_url(url))
            .map_err(|e| Error::invalid_url(url, e.to_string()))?
            .options([(
                "statement_timeout",
                format!("{}", common.timeout.as_millis()),
            )]);
        let describe = "sqlx PgPool as lock-sql opens it: INSERT … ON CONFLICT DO UPDATE … WHERE \
                        free or expired (now()) RETURNING version, then UPDATE … SET owner = NULL \
                        WHERE owner and version match";
        Self::open_with("postgres", &common, options, SQL, describe.to_owned()).await
    }
}
