//! What the SQL floors share: the pool lock-sql would open for the same
//! URL, the bare acquire and release run on it, the row a grant took, the
//! TTL as their statements bind it, what a release's affected-row count
//! means, and their errors. Each dialect's file gives its statements and
//! connect options; how its acquire reports the version is lock-sql's
//! [`Dialect`], the same as the library's.

use std::time::Duration;

use distlock::backend::{OwnerToken, async_trait};
use distlock::backends::sql::{Dialect, SqlConfig};
use distlock::{Error, FencingToken, Result};
use sqlx::pool::PoolOptions;
use sqlx::{
    ColumnIndex, ConnectOptions, Connection, Database, Decode, Encode, Executor, IntoArguments,
    Pool, Type,
};

use super::primitive::{Floor, floor_error};

/// The dialect's own statements, on a table of the floor's own.
pub(super) struct Statements {
    /// Makes the table if it is missing.
    pub(super) create: &'static str,
    /// `(name, owner, ttl_ms)`: takes a free or expired row.
    pub(super) acquire: &'static str,
    /// `(name, owner, version)`: frees the row if owner and version match.
    pub(super) release: &'static str,
}

/// A pool on the library's database, and the dialect's bare statements.
pub(super) struct SqlFloor<DB: Database> {
    pool: Pool<DB>,
    backend: &'static str,
    sql: Statements,
    describe: String,
}

/// The URL checked as lock-sql checks it, and its common options.
pub(super) fn config(url: &str) -> Result<SqlConfig> {
    SqlConfig::from_url(&distlock::backend_url(url)?)
}

impl<DB> SqlFloor<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    /// Opens a pool with `options` and the pool settings lock-sql takes from
    /// `common` (its size, no ping before each statement, its wait for a
    /// connection), and makes the floor's table; `describe` is the
    /// primitive in words.
    pub(super) async fn open_with(
        backend: &'static str,
        common: &SqlConfig,
        options: <DB::Connection as Connection>::Options,
        sql: Statements,
        describe: String,
    ) -> Result<Self>
    where
        <DB::Connection as Connection>::Options: ConnectOptions<Connection = DB::Connection>,
    {
        let pool = PoolOptions::<DB>::new()
            .max_connections(common.pool_size)
            .test_before_acquire(false)
            .acquire_timeout(common.connect_timeout)
            .connect_with(options)
            .await
            .map_err(|e| convert(backend, "open the floor's pool", e))?;
        sqlx::query(sql.create)
            .execute(&pool)
            .await
            .map_err(|e| convert(backend, "create the floor's table", e))?;
        Ok(Self {
            pool,
            backend,
            sql,
            describe,
        })
    }
}

#[async_trait]
impl<DB> Floor for SqlFloor<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    type Grant = SqlGrant;

    fn describe(&self) -> String {
        self.describe.clone()
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<SqlGrant>> {
        let owner = owner.to_hex();
        let acquire = sqlx::query::<DB>(self.sql.acquire)
            .bind(name)
            .bind(owner.as_str())
            .bind(ttl_ms(ttl));
        let version = DB::taken(&self.pool, acquire)
            .await
            .map_err(|e| convert(self.backend, "acquire", e))?;
        Ok(version.map(|version| SqlGrant {
            name: name.to_owned(),
            owner,
            version: FencingToken::to_i64(version),
        }))
    }

    async fn release(&self, grant: &SqlGrant) -> Result<()> {
        let done = sqlx::query::<DB>(self.sql.release)
            .bind(grant.name.as_str())
            .bind(grant.owner.as_str())
            .bind(grant.version)
            .execute(&self.pool)
            .await
            .map_err(|e| convert(self.backend, "release", e))?;
        grant.released(DB::rows_affected(&done))
    }
}

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
