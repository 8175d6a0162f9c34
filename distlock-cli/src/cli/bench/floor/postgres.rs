//! The floor of `postgres://`: the bare upsert that takes a free or expired
//! row and the bare update that frees it, on the same database, with the
//! same pool settings lock-sql's `postgres.rs` uses (pool size, no ping
//! before each statement, `statement_timeout`), in a table of its own. No
//! `LISTEN`, no `pg_notify`.

use std::str::FromStr;
use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::{QueryOptions, async_trait};
use distlock::backends::sql::CommonOptions;
use distlock::{Error, Result};
use sqlx::Row as _;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::primitive::{Floor, base_url};
use super::sql::{SqlGrant, convert, ttl_ms};

const CREATE: &str = "CREATE TABLE IF NOT EXISTS distlock_bench_floor (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    owner CHAR(32),
    version BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
)";

const ACQUIRE: &str = "INSERT INTO distlock_bench_floor AS l (name, owner, version, expires_at)
    VALUES ($1, $2, 1, now() + $3::BIGINT * INTERVAL '1 millisecond')
    ON CONFLICT (name) DO UPDATE SET
        version = l.version + 1,
        owner = EXCLUDED.owner,
        expires_at = EXCLUDED.expires_at
    WHERE l.owner IS NULL OR l.expires_at <= now()
    RETURNING version";

const RELEASE: &str = "UPDATE distlock_bench_floor SET owner = NULL
    WHERE name = $1 AND owner = $2 AND version = $3";

/// A pool on the library's database.
pub(super) struct PostgresFloor {
    pool: PgPool,
}

impl PostgresFloor {
    /// Connects as lock-sql connects for the same URL.
    pub(super) async fn open(url: &str) -> Result<Self> {
        let common = CommonOptions::take(&mut QueryOptions::parse(url)?, url)?;
        let options = PgConnectOptions::from_str(base_url(url))
            .map_err(|e| Error::invalid_url(url, e.to_string()))?
            .options([(
                "statement_timeout",
                format!("{}", common.timeout.as_millis()),
            )]);
        let pool = PgPoolOptions::new()
            .max_connections(common.pool_size)
            .test_before_acquire(false)
            .acquire_timeout(common.connect_timeout)
            .connect_with(options)
            .await
            .map_err(|e| convert("postgres", "open the floor's pool", e))?;
        sqlx::query(CREATE)
            .execute(&pool)
            .await
            .map_err(|e| convert("postgres", "create the floor's table", e))?;
        Ok(Self { pool })
    }
}

#[async_trait]
impl Floor for PostgresFloor {
    type Grant = SqlGrant;

    fn describe(&self) -> String {
        "sqlx PgPool as lock-sql opens it: INSERT … ON CONFLICT DO UPDATE … WHERE free or \
         expired (now()) RETURNING version, then UPDATE … SET owner = NULL WHERE owner and \
         version match"
            .to_owned()
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
            .map_err(|e| convert("postgres", "acquire", e))?;
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
            .map_err(|e| convert("postgres", "release", e))?;
        grant.released(done.rows_affected())
    }
}
