//! The floor of `sqlite://`: the bare upsert that takes a free or expired
//! row and the bare update that frees it, on the same file, with the same
//! pragmas and pool size that lock-sql's `sqlite.rs` uses, in a table of
//! its own.

use std::path::PathBuf;
use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::{QueryOptions, async_trait};
use distlock::backends::sql::CommonOptions;
use distlock::{Error, Result};
use percent_encoding::percent_decode_str;
use sqlx::Row as _;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::primitive::Floor;
use super::sql::{SqlGrant, convert, ttl_ms};

const CREATE: &str = "CREATE TABLE IF NOT EXISTS distlock_bench_floor (
    name TEXT NOT NULL PRIMARY KEY,
    owner TEXT,
    version INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
)";

// The database's clock in milliseconds, as lock-sql reads it.
const ACQUIRE: &str = "INSERT INTO distlock_bench_floor (name, owner, version, expires_at)
    VALUES (?1, ?2, 1, CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?3)
    ON CONFLICT (name) DO UPDATE SET
        version = distlock_bench_floor.version + 1,
        owner = excluded.owner,
        expires_at = excluded.expires_at
    WHERE distlock_bench_floor.owner IS NULL
        OR distlock_bench_floor.expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER)
    RETURNING version";

const RELEASE: &str = "UPDATE distlock_bench_floor SET owner = NULL
    WHERE name = ?1 AND owner = ?2 AND version = ?3";

/// A pool on the library's database file.
pub(super) struct SqliteFloor {
    pool: SqlitePool,
    path: PathBuf,
}

impl SqliteFloor {
    /// Opens the file `url` names with the pragmas and pool size the URL
    /// gives lock-sql.
    pub(super) async fn open(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| Error::invalid_url(url, "expected sqlite://PATH"))?;
        let raw_path = rest.split_once('?').map_or(rest, |(p, _)| p);
        let path = PathBuf::from(percent_decode_str(raw_path).decode_utf8_lossy().as_ref());
        let mut query = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut query, url)?;
        let synchronous = match query.take("synchronous").as_deref() {
            Some("normal") => SqliteSynchronous::Normal,
            _ => SqliteSynchronous::Full,
        };
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(common.timeout);
        let pool = SqlitePoolOptions::new()
            .max_connections(common.pool_size)
            .test_before_acquire(false)
            .acquire_timeout(common.connect_timeout)
            .connect_with(options)
            .await
            .map_err(|e| convert("sqlite", "open the floor's pool", e))?;
        sqlx::query(CREATE)
            .execute(&pool)
            .await
            .map_err(|e| convert("sqlite", "create the floor's table", e))?;
        Ok(Self { pool, path })
    }
}

#[async_trait]
impl Floor for SqliteFloor {
    type Grant = SqlGrant;

    fn describe(&self) -> String {
        format!(
            "sqlx on {}: INSERT … ON CONFLICT DO UPDATE … WHERE free or expired RETURNING \
             version, then UPDATE … SET owner = NULL WHERE owner and version match",
            self.path.display()
        )
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<SqlGrant>> {
        let owner = owner.to_hex();
        let row = sqlx::query(ACQUIRE)
            .bind(name)
            .bind(&owner)
            .bind(ttl_ms(ttl))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| convert("sqlite", "acquire", e))?;
        Ok(row.map(|row| SqlGrant {
            name: name.to_owned(),
            owner,
            version: row.get(0),
        }))
    }

    async fn release(&self, grant: &SqlGrant) -> Result<()> {
        let done = sqlx::query(RELEASE)
            .bind(&grant.name)
            .bind(&grant.owner)
            .bind(grant.version)
            .execute(&self.pool)
            .await
            .map_err(|e| convert("sqlite", "release", e))?;
        grant.released(done.rows_affected())
    }
}
