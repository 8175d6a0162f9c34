//! The floor of `sqlite://`: the bare upsert that takes a free or expired
//! row and the bare update that frees it, on the same file, with the same
//! pragmas and pool size that lock-sql's `sqlite.rs` uses, in a table of
//! its own.

use std::path::PathBuf;
use std::time::Duration;

use distlock::url::QueryOptions;
use distlock::{Error, OwnerToken, Result, async_trait};
use percent_encoding::percent_decode_str;
use sqlx::Row as _;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::{Floor, floor_error};

// lock-sql's defaults for the options a sqlite:// URL leaves out; the floor
// must open the file exactly as the library does.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_POOL_SIZE: u32 = 4;

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

/// A row taken by an owner at a version.
pub(super) struct SqliteGrant {
    name: String,
    owner: String,
    version: i64,
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
        let timeout = query.take_duration("timeout")?.unwrap_or(DEFAULT_TIMEOUT);
        let connect_timeout = query
            .take_duration("connect_timeout")?
            .unwrap_or(DEFAULT_TIMEOUT);
        let synchronous = match query.take("synchronous").as_deref() {
            Some("normal") => SqliteSynchronous::Normal,
            _ => SqliteSynchronous::Full,
        };
        let pool_size = query
            .take_parsed("pool_size", "a whole number")?
            .unwrap_or(DEFAULT_POOL_SIZE);
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(timeout);
        let pool = SqlitePoolOptions::new()
            .max_connections(pool_size)
            .test_before_acquire(false)
            .acquire_timeout(connect_timeout)
            .connect_with(options)
            .await
            .map_err(|e| convert("open the floor's pool", e))?;
        sqlx::query(CREATE)
            .execute(&pool)
            .await
            .map_err(|e| convert("create the floor's table", e))?;
        Ok(Self { pool, path })
    }
}

#[async_trait]
impl Floor for SqliteFloor {
    type Grant = SqliteGrant;

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
    ) -> Result<Option<SqliteGrant>> {
        let owner = owner.to_hex();
        let row = sqlx::query(ACQUIRE)
            .bind(name)
            .bind(&owner)
            .bind(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| convert("acquire", e))?;
        Ok(row.map(|row| SqliteGrant {
            name: name.to_owned(),
            owner,
            version: row.get(0),
        }))
    }

    async fn release(&self, grant: &SqliteGrant) -> Result<()> {
        let done = sqlx::query(RELEASE)
            .bind(&grant.name)
            .bind(&grant.owner)
            .bind(grant.version)
            .execute(&self.pool)
            .await
            .map_err(|e| convert("release", e))?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: grant.name.clone(),
            })
        }
    }
}

/// Errors lock-sql would retry end up retried here too; anything else ends
/// the run.
fn convert(operation: &str, e: sqlx::Error) -> Error {
    floor_error("sqlite", operation, lock_sql::is_transient(&e), e)
}
