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

#[cfg(feature = "sqlite")]
use crate::admission::Admission;
use crate::driver::{Driver, Member, Released, Row};
use crate::error::ErrorMap;
use crate::groups::{GroupKey, Want};

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
    /// How an attempt joins a semaphore or read-write lock.
    pub(crate) join: Join,
    /// `(family, name, owner, token, ttl_ms)`; one row affected when
    /// extended.
    pub(crate) renew_member: String,
    /// `(family, name, owner, token)`; one row affected (PostgreSQL: one
    /// row returned) when a live holder's row was deleted.
    pub(crate) leave: String,
    /// `(family, name, owner)`.
    pub(crate) leave_all: String,
    /// `(family, name, owner, token)` → `(count)` of such live holders.
    pub(crate) is_member: String,
    /// `(family, name)` → `(owner, kind, token, remaining_ms)` of every
    /// live holder, by token.
    pub(crate) members: String,
}

/// How one dialect admits a holder of a semaphore or read-write lock.
#[derive(Debug)]
pub(crate) enum Join {
    /// One statement calling a function of ours: `(family, name, owner,
    /// kind, permits, ttl_ms)` → `(token)`, `NULL` when refused.
    #[cfg(feature = "postgres")]
    Function(String),
    /// A short transaction.
    #[cfg(feature = "sqlite")]
    Transaction(Admission),
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
        row.as_ref()
            .map(Row::from_row)
            .transpose()
            .map_err(|e| self.errors.convert("holder", e))
    }

    async fn join(
        &self,
        group: &GroupKey,
        owner: &str,
        want: Want,
        ttl_ms: i64,
    ) -> Result<Option<FencingToken>> {
        match &self.sql.join {
            #[cfg(feature = "postgres")]
            Join::Function(call) => {
                let row = sqlx::query::<DB>(AssertSqlSafe(call.as_str()))
                    .bind(group.family)
                    .bind(group.name.as_str())
                    .bind(owner)
                    .bind(want.kind)
                    .bind(want.permits)
                    .bind(ttl_ms)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| self.errors.convert("acquire", e))?;
                let token = row
                    .try_get::<Option<i64>, _>(0)
                    .map_err(|e| self.errors.convert("acquire", e))?;
                Ok(token.map(FencingToken::from_i64))
            }
            #[cfg(feature = "sqlite")]
            Join::Transaction(admission) => {
                admission
                    .run(&self.pool, &self.errors, group, owner, want, ttl_ms)
                    .await
            }
        }
    }

    async fn renew_member(
        &self,
        group: &GroupKey,
        owner: &str,
        token: FencingToken,
        ttl_ms: i64,
    ) -> Result<bool> {
        let done = sqlx::query::<DB>(AssertSqlSafe(self.sql.renew_member.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .bind(ttl_ms)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("renew", e))?;
        Ok(done.rows() == 1)
    }

    async fn leave(&self, group: &GroupKey, owner: &str, token: FencingToken) -> Result<bool> {
        let done = sqlx::query::<DB>(AssertSqlSafe(self.sql.leave.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("release", e))?;
        Ok(done.rows() == 1)
    }

    async fn leave_all(&self, group: &GroupKey, owner: &str) -> Result<()> {
        sqlx::query::<DB>(AssertSqlSafe(self.sql.leave_all.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("abandon", e))?;
        Ok(())
    }

    async fn members(&self, group: &GroupKey) -> Result<Vec<Member>> {
        let rows = sqlx::query::<DB>(AssertSqlSafe(self.sql.members.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.errors.convert("holders", e))?;
        rows.iter()
            .map(Member::from_row)
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| self.errors.convert("holders", e))
    }

    async fn is_member(&self, group: &GroupKey, owner: &str, token: FencingToken) -> Result<bool> {
        let count: i64 = sqlx::query::<DB>(AssertSqlSafe(self.sql.is_member.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .fetch_one(&self.pool)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| self.errors.convert("check the owner", e))?;
        Ok(count > 0)
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
