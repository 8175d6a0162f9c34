//! One [`Driver`] for every dialect: the dialects differ in their SQL text
//! ([`Statements`]), their pool, and in how two statements answer
//! ([`Dialect`]), so the statements are run by the same generic code.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use lock_core::backend::{Family, async_trait};
use lock_core::{Capabilities, FencingToken, Result};
use sqlx::query::Query;
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row as _,
    Type,
};

use crate::driver::{Driver, Member, Released, Row};
use crate::error::ErrorMap;
use crate::groups::{GroupKey, Single, Want};
use crate::handover::Named;
use crate::queue::{NoTurn, WriteQueue, Writer};
use crate::statements::{Join, Statements};

/// A statement with its parameters bound.
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
pub type Bound<DB> = Query<'static, DB, <DB as Database>::Arguments>;

/// What sqlx's generic [`Database`] leaves to each dialect. By default a
/// statement answers with `RETURNING` (SQLite, PostgreSQL); MySQL, which
/// has none, overrides both answers. Public with feature `raw`, for the
/// benchmark's floors, whose bare statements answer the same way.
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
pub trait Dialect: Database {
    /// Whether `renew` and `renew_member` take the TTL as their first
    /// parameter rather than their last: MySQL binds its `?` in the order
    /// they stand, and its `SET expires_at = … + ?` comes before the
    /// `WHERE`.
    const TTL_FIRST: bool = false;

    /// `rows_affected`, which is not on sqlx's generic `Database` trait,
    /// though every dialect's result type has it.
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// Runs an `acquire`: the version when taken.
    fn taken(
        pool: &Pool<Self>,
        acquire: Bound<Self>,
    ) -> impl Future<Output = Result<Option<FencingToken>, sqlx::Error>> + Send
    where
        for<'c> &'c mut Self::Connection: Executor<'c, Database = Self>,
        Self::Arguments: IntoArguments<Self>,
        for<'r> i64: Decode<'r, Self> + Type<Self>,
        usize: ColumnIndex<Self::Row>,
    {
        async move {
            let row = acquire.fetch_optional(pool).await?;
            row.map(|r| r.try_get::<i64, _>(0).map(FencingToken::from_i64))
                .transpose()
        }
    }

    /// Runs a `release`: what it found.
    fn released(
        pool: &Pool<Self>,
        release: Bound<Self>,
    ) -> impl Future<Output = Result<Released, sqlx::Error>> + Send
    where
        for<'c> &'c mut Self::Connection: Executor<'c, Database = Self>,
        Self::Arguments: IntoArguments<Self>,
        for<'r> bool: Decode<'r, Self> + Type<Self>,
        usize: ColumnIndex<Self::Row>,
    {
        async move {
            let row = release.fetch_optional(pool).await?;
            let in_time = row.map(|r| r.try_get::<bool, _>(0)).transpose()?;
            Ok(match in_time {
                Some(true) => Released::InTime,
                Some(false) => Released::Late,
                None => Released::NotOurs,
            })
        }
    }
}

/// Runs [`Statements`] on a pool of any [`Dialect`].
pub(crate) struct SqlDriver<DB: Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) sql: Statements,
    pub(crate) errors: ErrorMap,
    pub(crate) capabilities: Capabilities,
    /// SQLite only: the queue its read-write locks' writes take turns in
    /// within this process (`queue.rs`).
    pub(crate) writes: Option<Arc<WriteQueue>>,
}

/// `sql`, not yet bound.
fn statement<DB: Database>(sql: &str) -> Bound<DB> {
    sqlx::query::<DB>(AssertSqlSafe(sql))
}

impl<DB: Dialect> SqlDriver<DB>
where
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    /// A connection to write to `group` on, in its turn where this
    /// backend's writes to it queue (SQLite's read-write locks; one queue
    /// for all of them). The turn is taken before the connection, so a turn
    /// never waits for the pool while another write holds a connection and
    /// waits for the turn.
    async fn writer(&self, group: &GroupKey, operation: &'static str) -> Result<Writer<DB>> {
        let turn = match &self.writes {
            Some(queue) if group.family == Family::ReadWrite.tag() => Some(
                queue
                    .turn()
                    .await
                    .map_err(|why| self.no_turn(operation, why))?,
            ),
            _ => None,
        };
        let conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| self.errors.convert(operation, e))?;
        Ok(Writer::new(conn, turn))
    }

    /// The answer to a write that got no turn: SQLite's own, busy.
    fn no_turn(&self, operation: &'static str, why: NoTurn) -> lock_core::Error {
        let backend = self.errors.backend;
        let why = match why {
            NoTurn::Waited(limit) => {
                format!("waited {limit:?} for this backend's writes ahead of it")
            }
            NoTurn::LockedOut => {
                "a write of this backend ahead of it was kept out by another writer".to_owned()
            }
        };
        lock_core::Error::unavailable(backend, format!("{operation}: database is locked ({why})"))
    }

    /// The row of `name`'s live holder, as the holder query answers.
    async fn holder_row(
        &self,
        at: Single,
        name: &str,
        operation: &'static str,
    ) -> Result<Option<DB::Row>>
    where
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        DB::Arguments: IntoArguments<DB>,
        for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    {
        statement::<DB>(&self.sql.of(at).holder)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.errors.convert(operation, e))
    }

    /// `sql` with `ttl_ms` bound where the dialect takes it, around the
    /// parameters `bind` binds.
    fn with_ttl(sql: &str, ttl_ms: i64, bind: impl FnOnce(Bound<DB>) -> Bound<DB>) -> Bound<DB> {
        if DB::TTL_FIRST {
            bind(statement::<DB>(sql).bind(ttl_ms))
        } else {
            bind(statement::<DB>(sql)).bind(ttl_ms)
        }
    }
}

#[async_trait]
impl<DB> Driver for SqlDriver<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> bool: Decode<'r, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn acquire(
        &self,
        at: Single,
        name: &str,
        owner: &str,
        ttl_ms: i64,
        value: &str,
    ) -> Result<Option<FencingToken>> {
        let acquire = statement::<DB>(&self.sql.of(at).acquire)
            .bind(name)
            .bind(owner)
            .bind(ttl_ms);
        let acquire = match at {
            Single::Mutex => acquire,
            Single::Election => acquire.bind(value),
        };
        DB::taken(&self.pool, acquire)
            .await
            .map_err(|e| self.errors.convert("acquire", e))
    }

    async fn renew(
        &self,
        at: Single,
        name: &str,
        owner: &str,
        version: FencingToken,
        ttl_ms: i64,
    ) -> Result<bool> {
        let renew = Self::with_ttl(&self.sql.of(at).renew, ttl_ms, |q| {
            q.bind(name).bind(owner).bind(version.to_i64())
        });
        let done = renew
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("renew", e))?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn release(
        &self,
        at: Single,
        name: &str,
        owner: &str,
        version: FencingToken,
    ) -> Result<Released> {
        let release = statement::<DB>(&self.sql.of(at).release)
            .bind(name)
            .bind(owner)
            .bind(version.to_i64());
        DB::released(&self.pool, release)
            .await
            .map_err(|e| self.errors.convert("release", e))
    }

    async fn abandon(&self, at: Single, name: &str, owner: &str) -> Result<()> {
        statement::<DB>(&self.sql.of(at).abandon)
            .bind(name)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("abandon", e))?;
        Ok(())
    }

    async fn holder(&self, at: Single, name: &str) -> Result<Option<Row>> {
        let row = self.holder_row(at, name, "holder").await?;
        row.as_ref()
            .map(Row::from_row)
            .transpose()
            .map_err(|e| self.errors.convert("holder", e))
    }

    async fn leader(&self, name: &str) -> Result<Option<(Row, String)>> {
        let row = self.holder_row(Single::Election, name, "leader").await?;
        let read = |r: &DB::Row| Ok::<_, sqlx::Error>((Row::from_row(r)?, r.try_get(3)?));
        row.as_ref()
            .map(read)
            .transpose()
            .map_err(|e| self.errors.convert("leader", e))
    }

    async fn proclaim(
        &self,
        name: &str,
        owner: &str,
        version: FencingToken,
        value: &str,
    ) -> Result<bool> {
        let done = statement::<DB>(&self.sql.proclaim)
            .bind(value)
            .bind(name)
            .bind(owner)
            .bind(version.to_i64())
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("proclaim", e))?;
        Ok(DB::rows_affected(&done) == 1)
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
                let row = statement::<DB>(call)
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
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            Join::Transaction(admission) => {
                let mut conn = self.writer(group, "acquire").await?;
                let token = admission.run(&mut *conn, group, owner, want, ttl_ms).await;
                conn.answered(token)
                    .map(|token| token.map(FencingToken::from_i64))
                    .map_err(|e| self.errors.convert("acquire", e))
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
        let mut conn = self.writer(group, "renew").await?;
        let renew = Self::with_ttl(&self.sql.renew_member, ttl_ms, |q| {
            q.bind(group.family)
                .bind(group.name.as_str())
                .bind(owner)
                .bind(token.to_i64())
        });
        let done = renew.execute(&mut *conn).await;
        let done = conn
            .answered(done)
            .map_err(|e| self.errors.convert("renew", e))?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn leave(&self, group: &GroupKey, owner: &str, token: FencingToken) -> Result<bool> {
        let mut conn = self.writer(group, "release").await?;
        let done = statement::<DB>(&self.sql.leave)
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .execute(&mut *conn)
            .await;
        let done = conn
            .answered(done)
            .map_err(|e| self.errors.convert("release", e))?;
        Ok(DB::rows_affected(&done) == 1)
    }

    fn admits_on_leave(&self) -> bool {
        match &self.sql.join {
            #[cfg(feature = "postgres")]
            Join::Function(_) => self.sql.leave_and_admit.is_some(),
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            Join::Transaction(_) => true,
        }
    }

    async fn leave_and_admit(
        &self,
        group: &GroupKey,
        owner: &str,
        token: FencingToken,
        waiters: &[Named],
    ) -> Result<(bool, Vec<(String, i64)>)> {
        let sql = match (&self.sql.leave_and_admit, &self.sql.join) {
            (Some(sql), _) => sql,
            #[cfg(any(feature = "sqlite", feature = "mysql"))]
            (None, Join::Transaction(admission)) if !waiters.is_empty() => {
                let mut conn = self.writer(group, "release").await?;
                let done = admission
                    .leave_and_admit(
                        &mut *conn,
                        &self.sql.leave,
                        group,
                        owner,
                        token,
                        waiters,
                        DB::rows_affected,
                    )
                    .await;
                return conn
                    .answered(done)
                    .map_err(|e| self.errors.convert("release", e));
            }
            _ => return Ok((self.leave(group, owner, token).await?, Vec::new())),
        };
        let map = |e| self.errors.convert("release", e);
        // `owner:kind:ttl_ms`, comma-separated: owners are hex and kinds
        // words, so neither holds a separator.
        let waiters = waiters
            .iter()
            .map(|w| format!("{}:{}:{}", w.owner, w.side.tag(), w.ttl_ms))
            .collect::<Vec<_>>()
            .join(",");
        let rows = statement::<DB>(sql)
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .bind(waiters.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(map)?;
        let mut left = false;
        let mut admitted = Vec::new();
        for row in rows {
            let owner: Option<String> = row.try_get(0).map_err(map)?;
            let token: i64 = row.try_get(1).map_err(map)?;
            match owner {
                Some(waiter) => admitted.push((waiter, token)),
                None => left = true,
            }
        }
        Ok((left, admitted))
    }

    async fn leave_all(&self, group: &GroupKey, owner: &str) -> Result<()> {
        let mut conn = self.writer(group, "abandon").await?;
        let done = statement::<DB>(&self.sql.leave_all)
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .execute(&mut *conn)
            .await;
        conn.answered(done)
            .map_err(|e| self.errors.convert("abandon", e))?;
        Ok(())
    }

    async fn members(&self, group: &GroupKey) -> Result<Vec<Member>> {
        let rows = statement::<DB>(&self.sql.members)
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
        let count: i64 = statement::<DB>(&self.sql.is_member)
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

impl<DB: Database> fmt::Debug for SqlDriver<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the password: never print them.
        f.debug_struct("SqlDriver")
            .field("backend", &self.capabilities.backend)
            .field("pool_size", &self.pool.size())
            .finish_non_exhaustive()
    }
}
