//! MySQL and MariaDB: one statement per operation without `RETURNING`.
//!
//! MariaDB 10.11 has no `UPDATE … RETURNING` and MySQL none at all, so each
//! statement reports its answer through `LAST_INSERT_ID(expr)`: the server
//! sends the last value given to it in the statement's OK packet
//! (`last_insert_id`), and nothing else in the statement can change that
//! value. Waiters poll with jittered backoff: there is no notification
//! mechanism to wake them.
//!
//! Every pooled session gets the configured timeout as its own server-side
//! limit ([`SessionLimits`](limits::SessionLimits)), so a statement stuck behind a row lock is
//! stopped by the server instead of running, and perhaps taking the row,
//! after the client gave up on it.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::async_trait;
use lock_core::secret::read_password_file;
use lock_core::{Capabilities, Fencing, FencingToken, LockName, Result};
use sqlx::AssertSqlSafe;
use sqlx::error::DatabaseError;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

use crate::backend::{SqlBackend, within};
use crate::config::ServerOptions;
use crate::driver::{Driver, Member, Released, Row};
use crate::error::ErrorMap;
use crate::groups::{GroupKey, Want};
use crate::pool::Checked;
use crate::table::TableName;

mod config;
mod limits;
mod schema;
mod statements;
pub(crate) use config::Config;
use limits::SessionLimits;
use statements::Statements;

const CAPABILITIES: Capabilities = Capabilities::new(crate::MYSQL_NAME, Fencing::Strict)
    .with_semaphores(true)
    .with_read_write(true);

pub(crate) fn transient(e: &dyn DatabaseError) -> bool {
    // 1205 lock wait timeout, 1969 statement time exceeded (MariaDB),
    // 1213 deadlock, 1040 too many connections, 1053 server shutdown,
    // 2006/2013 server gone / lost connection.
    const CODES: &[&str] = &["1205", "1969", "1213", "1040", "1053", "2006", "2013"];
    let code = e
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|m| m.number().to_string());
    code.is_some_and(|c| CODES.contains(&c.as_str()))
}

/// Connects to the database `config` names, creating the table if it is
/// missing.
pub(crate) async fn connect(config: Config) -> Result<SqlBackend> {
    let Config {
        server,
        mut options,
        ..
    } = config;
    let ServerOptions {
        common,
        password_file,
        tls,
        ..
    } = server;
    options = crate::tls::mysql(&tls, options)?;
    if let Some(path) = password_file {
        options = options.password(&read_password_file(crate::MYSQL_NAME, &path)?);
    }
    let errors = ErrorMap {
        backend: crate::MYSQL_NAME,
        pool_timeout: common.connect_timeout,
    };
    let limits = Arc::new(SessionLimits::new(common.timeout));
    let pool = MySqlPoolOptions::new()
        .max_connections(common.pool_size)
        .after_connect(move |conn, _| {
            let limits = limits.clone();
            Box::pin(async move { limits.apply(conn).await })
        })
        // One round trip per operation: no ping before each statement. A
        // dead connection surfaces as a retryable error instead.
        .test_before_acquire(false)
        .acquire_timeout(common.connect_timeout)
        .connect_with(options)
        .await
        .map_err(|e| errors.convert("connect", e))?;
    start(
        pool,
        &common.table,
        common.timeout,
        common.create_tables,
        errors,
    )
    .await
}

/// A backend on a pool the application made (see the crate docs). Its
/// sessions keep whatever server-side limits the application gave them:
/// every statement is still bounded on the client, and an acquire that
/// lands late is undone.
pub(crate) async fn from_pool(pool: MySqlPool, options: Checked) -> Result<SqlBackend> {
    let errors = crate::pool::errors(crate::MYSQL_NAME, &pool);
    start(
        pool,
        &options.table,
        options.timeout,
        options.create_tables,
        errors,
    )
    .await
}

/// Creates the tables if they are missing (or checks they are there), reads
/// the name column's size, and makes the backend.
async fn start(
    pool: MySqlPool,
    table: &TableName,
    timeout: Duration,
    create_tables: bool,
    errors: ErrorMap,
) -> Result<SqlBackend> {
    let t = table.as_str();
    let (h, g) = (table.companion("holders"), table.companion("groups"));
    let limit = SqlBackend::client_limit(timeout);
    within(
        limit,
        "create table",
        schema::prepare(&pool, table, create_tables, &errors),
    )
    .await?;
    let size: Option<i64> = within(limit, "inspect table", async {
        sqlx::query_scalar(
            "SELECT CAST(character_maximum_length AS SIGNED) FROM information_schema.columns
             WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'name'",
        )
        .bind(t)
        .fetch_optional(&pool)
        .await
        .map_err(|e| errors.convert("inspect table", e))
    })
    .await?
    .flatten();
    let name_limit = size
        .and_then(|s| usize::try_from(s).ok())
        .unwrap_or(LockName::MAX_LEN);
    let driver = MySql {
        pool,
        sql: Statements::new(t, &h, &g),
        errors,
    };
    Ok(SqlBackend::new(driver, timeout).with_name_limit(name_limit))
}

struct MySql {
    pool: MySqlPool,
    sql: Statements,
    errors: ErrorMap,
}

impl std::fmt::Debug for MySql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The pool's options hold the password: never print them.
        f.debug_struct("MySql")
            .field("pool_size", &self.pool.size())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Driver for MySql {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn acquire(&self, name: &str, owner: &str, ttl_ms: i64) -> Result<Option<FencingToken>> {
        let done = sqlx::query(AssertSqlSafe(self.sql.acquire.as_str()))
            .bind(name)
            .bind(owner)
            .bind(ttl_ms)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("acquire", e))?;
        Ok(Some(done.last_insert_id())
            .filter(|v| *v > 0)
            .map(FencingToken::new))
    }

    async fn renew(
        &self,
        name: &str,
        owner: &str,
        version: FencingToken,
        ttl_ms: i64,
    ) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.sql.renew.as_str()))
            .bind(ttl_ms)
            .bind(name)
            .bind(owner)
            .bind(version.to_i64())
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("renew", e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(&self, name: &str, owner: &str, version: FencingToken) -> Result<Released> {
        let done = sqlx::query(AssertSqlSafe(self.sql.release.as_str()))
            .bind(name)
            .bind(owner)
            .bind(version.to_i64())
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("release", e))?;
        Ok(match (done.rows_affected(), done.last_insert_id()) {
            (0, _) => Released::NotOurs,
            (_, 2) => Released::InTime,
            _ => Released::Late,
        })
    }

    async fn abandon(&self, name: &str, owner: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.abandon.as_str()))
            .bind(name)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("abandon", e))?;
        Ok(())
    }

    async fn holder(&self, name: &str) -> Result<Option<Row>> {
        let row = sqlx::query(AssertSqlSafe(self.sql.holder.as_str()))
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
        self.sql
            .admission
            .run(&self.pool, &self.errors, group, owner, want, ttl_ms)
            .await
    }

    async fn renew_member(
        &self,
        group: &GroupKey,
        owner: &str,
        token: FencingToken,
        ttl_ms: i64,
    ) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.sql.renew_member.as_str()))
            .bind(ttl_ms)
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("renew", e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn leave(&self, group: &GroupKey, owner: &str, token: FencingToken) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.sql.leave.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("release", e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn leave_all(&self, group: &GroupKey, owner: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.leave_all.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(|e| self.errors.convert("abandon", e))?;
        Ok(())
    }

    async fn members(&self, group: &GroupKey) -> Result<Vec<Member>> {
        let rows = sqlx::query(AssertSqlSafe(self.sql.members.as_str()))
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
        let count: i64 = sqlx::query_scalar(AssertSqlSafe(self.sql.is_member.as_str()))
            .bind(group.family)
            .bind(group.name.as_str())
            .bind(owner)
            .bind(token.to_i64())
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.errors.convert("check the owner", e))?;
        Ok(count > 0)
    }
}
