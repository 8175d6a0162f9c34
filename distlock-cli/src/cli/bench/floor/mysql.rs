//! The floor of `mysql://` and `mariadb://`: the bare
//! `INSERT … ON DUPLICATE KEY UPDATE` that takes a free or expired row and
//! reports the new version through `LAST_INSERT_ID(expr)` (as lock-sql's
//! `mysql.rs` does, there being no `RETURNING`), and the bare update that
//! frees it, with the same pool settings, in a table of its own.

use std::str::FromStr;
use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::{QueryOptions, async_trait};
use distlock::backends::sql::CommonOptions;
use distlock::{Error, Result};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use super::primitive::{Floor, base_url};
use super::sql::{SqlGrant, convert, ttl_ms};

const CREATE: &str = "CREATE TABLE IF NOT EXISTS distlock_bench_floor (
    name VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    version BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
) ENGINE = InnoDB";

// The database's clock in milliseconds, as lock-sql reads it. `SET`
// assignments run left to right, each seeing the ones before: `version` and
// `owner` test the old row; `expires_at` then sees our owner exactly when
// the row was takeable (owners are random per acquisition).
const ACQUIRE: &str = "INSERT INTO distlock_bench_floor (name, owner, version, expires_at)
    VALUES (?, ?, LAST_INSERT_ID(1), CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ?)
    ON DUPLICATE KEY UPDATE
        version = IF(owner IS NULL OR expires_at <= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
                     LAST_INSERT_ID(version + 1), version + LAST_INSERT_ID(0)),
        owner = IF(owner IS NULL OR expires_at <= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
                   VALUES(owner), owner),
        expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)";

const RELEASE: &str = "UPDATE distlock_bench_floor SET owner = NULL
    WHERE name = ? AND owner = ? AND version = ?";

/// A pool on the library's database.
pub(super) struct MySqlFloor {
    pool: MySqlPool,
}

impl MySqlFloor {
    /// Connects as lock-sql connects for the same URL.
    pub(super) async fn open(url: &str) -> Result<Self> {
        let common = CommonOptions::take(&mut QueryOptions::parse(url)?, url)?;
        // sqlx knows the `mysql` scheme only; both name the same protocol.
        let base = base_url(url);
        let base = base
            .strip_prefix("mariadb:")
            .map_or_else(|| base.to_owned(), |rest| format!("mysql:{rest}"));
        let options = MySqlConnectOptions::from_str(&base)
            .map_err(|e| Error::invalid_url(url, e.to_string()))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(common.pool_size)
            .test_before_acquire(false)
            .acquire_timeout(common.connect_timeout)
            .connect_with(options)
            .await
            .map_err(|e| convert("mysql", "open the floor's pool", e))?;
        sqlx::query(CREATE)
            .execute(&pool)
            .await
            .map_err(|e| convert("mysql", "create the floor's table", e))?;
        Ok(Self { pool })
    }
}

#[async_trait]
impl Floor for MySqlFloor {
    type Grant = SqlGrant;

    fn describe(&self) -> String {
        "sqlx MySqlPool as lock-sql opens it: INSERT … ON DUPLICATE KEY UPDATE … \
         LAST_INSERT_ID(version + 1) if free or expired, then UPDATE … SET owner = NULL WHERE \
         owner and version match"
            .to_owned()
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<SqlGrant>> {
        let owner = owner.to_hex();
        let done = sqlx::query(ACQUIRE)
            .bind(name)
            .bind(&owner)
            .bind(ttl_ms(ttl))
            .execute(&self.pool)
            .await
            .map_err(|e| convert("mysql", "acquire", e))?;
        let version = done.last_insert_id();
        Ok((version > 0).then(|| SqlGrant {
            name: name.to_owned(),
            owner,
            version: i64::try_from(version).unwrap_or(i64::MAX),
        }))
    }

    async fn release(&self, grant: &SqlGrant) -> Result<()> {
        let done = sqlx::query(RELEASE)
            .bind(&grant.name)
            .bind(&grant.owner)
            .bind(grant.version)
            .execute(&self.pool)
            .await
            .map_err(|e| convert("mysql", "release", e))?;
        grant.released(done.rows_affected())
    }
}
