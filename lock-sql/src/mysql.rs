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
//! limit ([`SessionLimits`]), so a statement stuck behind a row lock is
//! stopped by the server instead of running, and perhaps taking the row,
//! after the client gave up on it.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::async_trait;
use lock_core::secret::read_password_file;
use lock_core::{Capabilities, Fencing, FencingToken, LockName, Result};
use sqlx::error::DatabaseError;
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, Row as _};
use tokio::sync::OnceCell;

use crate::admission::Admission;
use crate::backend::{SqlBackend, within};
use crate::config::ServerOptions;
use crate::config::server_limit;
use crate::driver::{Driver, Released, Row};
use crate::error::ErrorMap;
use crate::groups::{GroupKey, Want};
use crate::pool::Checked;
use crate::table::TableName;

mod config;
mod schema;
pub(crate) use config::Config;

const CAPABILITIES: Capabilities = Capabilities::new(crate::MYSQL_NAME, Fencing::Strict)
    .with_semaphores(true)
    .with_read_write(true);

/// The database's clock in milliseconds; `NOW(3)` is fixed for the length of
/// one statement.
const NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

/// "The row may be taken": free, expired, or already ours. Evaluated against
/// the row as it is when the expression runs (see [`Statements::acquire`]).
const TAKEABLE: &str = "(owner IS NULL OR expires_at <= NOW_MS OR owner = VALUES(owner))";

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

/// Which server a `mysql://` or `mariadb://` URL reached: their statement
/// limits differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavour {
    MySql,
    MariaDb,
}

impl Flavour {
    /// From `SELECT VERSION()`: MariaDB says so (`10.11.6-MariaDB-…`).
    fn of(version: &str) -> Self {
        if version.to_ascii_lowercase().contains("mariadb") {
            Self::MariaDb
        } else {
            Self::MySql
        }
    }
}

/// The server-side limits every pooled session gets, from the configured
/// timeout, set when the pool opens the connection.
#[derive(Debug)]
struct SessionLimits {
    timeout: Duration,
    /// The `SET` statement, made once the first connection has told which
    /// server it reached.
    set: OnceCell<String>,
}

impl SessionLimits {
    fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            set: OnceCell::new(),
        }
    }

    async fn apply(&self, conn: &mut MySqlConnection) -> std::result::Result<(), sqlx::Error> {
        let set = self
            .set
            .get_or_try_init(|| async {
                let version: String = sqlx::query_scalar("SELECT VERSION()")
                    .fetch_one(&mut *conn)
                    .await?;
                Ok::<_, sqlx::Error>(set_limits(Flavour::of(&version), self.timeout))
            })
            .await?;
        sqlx::raw_sql(AssertSqlSafe(set.as_str()))
            .execute(conn)
            .await?;
        Ok(())
    }
}

/// The `SET` for one server. `innodb_lock_wait_timeout` bounds a wait for a
/// row lock, on both servers, in whole seconds; MariaDB's
/// `max_statement_time` bounds the whole statement, to the microsecond.
/// MySQL has nothing alike for writes (`max_execution_time` stops `SELECT`s
/// only). Both are rounded up, since a limit of zero means none and the
/// client's own limit is a second longer anyway, and kept within what the
/// servers accept.
fn set_limits(flavour: Flavour, timeout: Duration) -> String {
    const MAX_LOCK_WAIT_S: u128 = 1 << 30;
    const MAX_STATEMENT_US: u128 = 31_536_000 * 1_000_000;
    let lock_wait = server_limit(timeout, Duration::from_secs(1), MAX_LOCK_WAIT_S);
    let lock_wait = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}");
    match flavour {
        Flavour::MySql => lock_wait,
        Flavour::MariaDb => {
            let us = server_limit(timeout, Duration::from_micros(1), MAX_STATEMENT_US);
            let (s, us) = (us / 1_000_000, us % 1_000_000);
            format!("{lock_wait}, max_statement_time = {s}.{us:06}")
        }
    }
}

/// The statements for one table; `?` parameters are bound in the order each
/// field's doc gives.
#[derive(Debug)]
struct Statements {
    /// `(name, owner, ttl_ms)`; `last_insert_id` is the version when taken,
    /// 0 when not.
    ///
    /// MySQL evaluates `SET` assignments left to right, each seeing the
    /// columns already assigned. So `version` goes first (it needs the old
    /// owner), then `owner` (still the old expiry), then `expires_at`, whose
    /// test now sees our owner exactly when the row was takeable. A fresh
    /// insert reports 1 from the `VALUES` row; on a duplicate, the update
    /// always overrides it, with the new version or with 0.
    acquire: String,
    /// `(ttl_ms, name, owner, version)`; one row matched when extended.
    renew: String,
    /// `(name, owner, version)`; no row matched when not ours, else
    /// `last_insert_id` 2 if the lease still ran, 1 if it had run out.
    release: String,
    /// `(name, owner)`.
    abandon: String,
    /// `(name)` → `(owner, version, remaining_ms)`.
    holder: String,
    /// Joining a semaphore or read-write lock: a short transaction.
    admission: Admission,
    /// `(ttl_ms, family, name, owner, token)`; one row matched when
    /// extended.
    renew_member: String,
    /// `(family, name, owner, token)`; one row deleted when the holder's
    /// lease still ran.
    leave: String,
    /// `(family, name, owner)`.
    leave_all: String,
    /// `(family, name, owner, token)` → `(count)` of such live holders.
    is_member: String,
}

impl Statements {
    fn new(t: &str, h: &str, g: &str) -> Self {
        let takeable = TAKEABLE.replace("NOW_MS", NOW_MS);
        let member = "family = ? AND name = ? AND owner = ? AND token = ? AND kind <> 'wait'";
        Self {
            acquire: format!(
                "INSERT INTO {t} (name, owner, version, expires_at) VALUES (?, ?, LAST_INSERT_ID(1), {NOW_MS} + ?)
                 ON DUPLICATE KEY UPDATE
                    version = IF({takeable},
                                 LAST_INSERT_ID(IF(owner <=> VALUES(owner), version, version + 1)),
                                 version + LAST_INSERT_ID(0)),
                    owner = IF({takeable}, VALUES(owner), owner),
                    expires_at = IF({takeable}, VALUES(expires_at), expires_at)"
            ),
            renew: format!(
                "UPDATE {t} SET expires_at = {NOW_MS} + ?
                 WHERE name = ? AND owner = ? AND version = ? AND expires_at > {NOW_MS}"
            ),
            release: format!(
                "UPDATE {t} SET expires_at = expires_at + 0 * LAST_INSERT_ID(1 + (expires_at > {NOW_MS})), owner = NULL
                 WHERE name = ? AND owner = ? AND version = ?"
            ),
            abandon: format!("UPDATE {t} SET owner = NULL WHERE name = ? AND owner = ?"),
            holder: format!(
                "SELECT owner, version, expires_at - {NOW_MS} FROM {t}
                 WHERE name = ? AND owner IS NOT NULL AND expires_at > {NOW_MS}"
            ),
            // READ COMMITTED for this one transaction: its locking reads
            // take record locks only, no gap locks, so admissions to two
            // different locks never block, nor deadlock, each other. The
            // reads that count are locking reads either way (see
            // `admission.rs`), which see the newest committed rows.
            admission: Admission {
                begin: "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
                lock: format!(
                    "INSERT INTO {g} (family, name, last_token) VALUES (?, ?, 0)
                     ON DUPLICATE KEY UPDATE last_token = last_token"
                ),
                read: format!(
                    "SELECT g.last_token, h.owner, h.kind, h.token, h.expires_at - {NOW_MS}
                     FROM {g} AS g LEFT JOIN {h} AS h ON h.family = g.family AND h.name = g.name
                     WHERE g.family = ? AND g.name = ?
                     FOR UPDATE"
                ),
                prune: format!(
                    "DELETE FROM {h} WHERE family = ? AND name = ? AND expires_at <= {NOW_MS}"
                ),
                extend: format!(
                    "UPDATE {h} SET expires_at = {NOW_MS} + ? WHERE family = ? AND name = ? AND owner = ?"
                ),
                advance: format!("UPDATE {g} SET last_token = ? WHERE family = ? AND name = ?"),
                put: format!(
                    "INSERT INTO {h} (family, name, owner, kind, token, expires_at)
                     VALUES (?, ?, ?, ?, ?, {NOW_MS} + ?)
                     ON DUPLICATE KEY UPDATE
                        kind = VALUES(kind), token = VALUES(token), expires_at = VALUES(expires_at)"
                ),
            },
            renew_member: format!(
                "UPDATE {h} SET expires_at = {NOW_MS} + ? WHERE {member} AND expires_at > {NOW_MS}"
            ),
            leave: format!("DELETE FROM {h} WHERE {member} AND expires_at > {NOW_MS}"),
            leave_all: format!("DELETE FROM {h} WHERE family = ? AND name = ? AND owner = ?"),
            is_member: format!(
                "SELECT COUNT(*) FROM {h} WHERE {member} AND expires_at > {NOW_MS}"
            ),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_flavour_comes_from_its_version() {
        assert_eq!(Flavour::of("10.11.6-MariaDB-0+deb12u1"), Flavour::MariaDb);
        assert_eq!(Flavour::of("5.5.5-10.6.12-mariadb-log"), Flavour::MariaDb);
        assert_eq!(Flavour::of("8.0.36"), Flavour::MySql);
        assert_eq!(Flavour::of("8.4.0-commercial"), Flavour::MySql);
    }

    #[test]
    fn session_limits_follow_the_timeout_rounded_up() {
        let ms = Duration::from_millis;
        let cases = [
            (
                Flavour::MariaDb,
                ms(5000),
                "SET SESSION innodb_lock_wait_timeout = 5, max_statement_time = 5.000000",
            ),
            (
                Flavour::MariaDb,
                ms(1500),
                "SET SESSION innodb_lock_wait_timeout = 2, max_statement_time = 1.500000",
            ),
            (
                Flavour::MariaDb,
                ms(250),
                "SET SESSION innodb_lock_wait_timeout = 1, max_statement_time = 0.250000",
            ),
            (
                Flavour::MariaDb,
                Duration::from_nanos(1),
                "SET SESSION innodb_lock_wait_timeout = 1, max_statement_time = 0.000001",
            ),
            (
                Flavour::MariaDb,
                Duration::from_secs(10 << 30),
                "SET SESSION innodb_lock_wait_timeout = 1073741824, max_statement_time = 31536000.000000",
            ),
            (
                Flavour::MySql,
                ms(250),
                "SET SESSION innodb_lock_wait_timeout = 1",
            ),
            (
                Flavour::MySql,
                ms(2001),
                "SET SESSION innodb_lock_wait_timeout = 3",
            ),
        ];
        for (flavour, timeout, set) in cases {
            assert_eq!(set_limits(flavour, timeout), set, "{flavour:?} {timeout:?}");
        }
    }
}
