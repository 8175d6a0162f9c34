//! One [`Driver`] for every dialect with `INSERT … ON CONFLICT … RETURNING`
//! (SQLite and PostgreSQL): the dialects differ only in their SQL text and
//! pool, so the statements are run by the same generic code.

use std::fmt;

use lock_core::backend::async_trait;
use lock_core::{Capabilities, FencingToken, Result};
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row as _,
    Type,
};

use crate::driver::{Driver, Released, Row};
use crate::error::ErrorMap;

/// The SQL text of every statement, for one table. Parameters are numbered
/// and bound in the order given on each field.
#[derive(Debug)]
pub(crate) struct Statements {
    /// `(name, owner, ttl_ms)` → one row `(version)` when taken. Takes the
    /// row if it is free, expired or already `owner`'s; bumps the version
    /// unless it is `owner`'s.
    pub(crate) acquire: String,
    /// `(name, owner, version, ttl_ms)`; one row affected when extended.
    pub(crate) renew: String,
    /// `(name, owner, version)` → one row `(still_in_time: bool)` when freed.
    pub(crate) release: String,
    /// `(name, owner)`.
    pub(crate) abandon: String,
    /// `(name)` → `(owner, version, remaining_ms)` of a live holder.
    pub(crate) holder: String,
}

/// Runs [`Statements`] on a pool of any database with `RETURNING`.
pub(crate) struct ReturningDriver<DB: Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) sql: Statements,
    pub(crate) errors: ErrorMap,
    pub(crate) capabilities: Capabilities,
}

#[async_trait]
impl<DB> Driver for ReturningDriver<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> bool: Decode<'r, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    DB::QueryResult: RowsAffected,
{
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn acquire(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<Option<FencingToken>> {
        let row = sqlx::query::<DB>(AssertSqlSafe(self.sql.acquire.as_str()))
            .bind(name)
            .bind(owner)
            .bind(ttl_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.errors.convert("acquire", e))?;
        row.map(|r| r.try_get::<i64, _>(0).map(FencingToken::from_i64))
            .transpose()
            .map_err(|e| self.errors.convert("acquire", e))
    }

    async fn renew(
        &self,
        name: &str,
        owner: &str,
        version: FencingToken,
        ttl_ms: i64,
    ) -> Result<bool> {
        let done = sqlx::query::<DB>(AssertSqlSafe(self.sql.renew.as_str()))
            .bind(name)
            .bind(owner)
            .bind(version.to_i64())
            .bind(ttl_ms)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("renew", e))?;
        Ok(done.rows() == 1)
    }

    async fn release(&self, name: &str, owner: &str, version: FencingToken) -> Result<Released> {
        let row = sqlx::query::<DB>(AssertSqlSafe(self.sql.release.as_str()))
            .bind(name)
            .bind(owner)
            .bind(version.to_i64())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.errors.convert("release", e))?;
        let in_time = row
            .map(|r| r.try_get::<bool, _>(0))
            .transpose()
            .map_err(|e| self.errors.convert("release", e))?;
        Ok(match in_time {
            Some(true) => Released::InTime,
            Some(false) => Released::Late,
            None => Released::NotOurs,
        })
    }

    async fn abandon(&self, name: &str, owner: &str) -> Result<()> {
        sqlx::query::<DB>(AssertSqlSafe(self.sql.abandon.as_str()))
            .bind(name)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("abandon", e))?;
        Ok(())
    }

    async fn holder(&self, name: &str) -> Result<Option<Row>> {
        let row = sqlx::query::<DB>(AssertSqlSafe(self.sql.holder.as_str()))
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.errors.convert("holder", e))?;
        row.map(|r| {
            Ok(Row::from_columns(
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
            ))
        })
        .transpose()
        .map_err(|e| self.errors.convert("holder", e))
    }
}

/// `rows_affected` is not on sqlx's generic `Database` trait, though every
/// dialect's result type has it.
pub(crate) trait RowsAffected {
    fn rows(&self) -> u64;
}

#[cfg(feature = "sqlite")]
impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[cfg(feature = "postgres")]
impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl<DB: Database> fmt::Debug for ReturningDriver<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the password: never print them.
        f.debug_struct("ReturningDriver")
            .field("backend", &self.capabilities.backend)
            .field("pool_size", &self.pool.size())
            .finish_non_exhaustive()
    }
}
