//! The floor of `sqlite://`: the bare upsert that takes a free or expired
//! row and the bare update that frees it, on the same file, with the same
//! pragmas and pool size that lock-sql's `sqlite.rs` uses, in a table of
//! its own.

use std::path::PathBuf;

use distlock::backend::QueryOptions;
use distlock::{Error, Result};
use percent_encoding::percent_decode_str;
use sqlx::sqlite::{Sqlite, SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use super::sql::{SqlFloor, Statements, config};

const SQL: Statements = Statements {
    create: "CREATE TABLE IF NOT EXISTS distlock_bench_floor (
    name TEXT NOT NULL PRIMARY KEY,
    owner TEXT,
    version INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
)",
    // The database's clock in milliseconds, as lock-sql reads it.
    acquire: "INSERT INTO distlock_bench_floor (name, owner, version, expires_at)
    VALUES (?1, ?2, 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?3)
    ON CONFLICT (name) DO UPDATE SET
        version = distlock_bench_floor.version + 1,
        owner = excluded.owner,
        expires_at = excluded.expires_at
    WHERE distlock_bench_floor.owner IS NULL
        OR distlock_bench_floor.expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER)
    RETURNING version",
    release: "UPDATE distlock_bench_floor SET owner = NULL
    WHERE name = ?1 AND owner = ?2 AND version = ?3",
};

/// A pool on the library's database file.
pub(super) type SqliteFloor = SqlFloor<Sqlite>;

impl SqlFloor<Sqlite> {
    /// Opens the file `url` names with the pragmas and pool size the URL
    /// gives lock-sql.
    pub(super) async fn open(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| Error::invalid_url(url, "expected sqlite://PATH"))?;
        let raw_path = rest.split_once('?').map_or(rest, |(p, _)| p);
        let path = PathBuf::from(percent_decode_str(raw_path).decode_utf8_lossy().as_ref());
        let common = config(url)?;
        let synchronous = match QueryOptions::parse(url)?.take("synchronous").as_deref() {
            Some("normal") => SqliteSynchronous::Normal,
            _ => SqliteSynchronous::Full,
        };
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(common.timeout);
        let describe = format!(
            "sqlx on {}: INSERT … ON CONFLICT DO UPDATE … WHERE free or expired RETURNING \
             version, then UPDATE … SET owner = NULL WHERE owner and version match",
            path.display()
        );
        Self::open_with("sqlite", &common, options, SQL, describe).await
    }
}
