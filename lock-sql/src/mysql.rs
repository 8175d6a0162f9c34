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

use lock_core::{Capabilities, Fencing, FencingToken, LockName, Result};
use sqlx::mysql::{MySql, MySqlPool, MySqlQueryResult};

use crate::client::{client_limit, within};
use crate::config::Checked;
use crate::config::mysql::Config;
use crate::driver::{Opened, Released};
use crate::error::ErrorMap;
use crate::names::MYSQL_NAME;
use crate::runner::{Bound, Dialect, SqlDriver};
use crate::table::TableName;

mod limits;
mod schema;
mod statements;
use limits::SessionLimits;

const CAPABILITIES: Capabilities = Capabilities::new(MYSQL_NAME, Fencing::Strict)
    .with_semaphores(true)
    .with_read_write(true)
    .with_elections(true);

/// Connects to the database `config` names, with the common options
/// `common`, creating the table if it is missing.
pub(crate) async fn connect(config: Config, common: Checked) -> Result<Opened> {
    let options = config.connect_options()?;
    let errors = ErrorMap {
        backend: MYSQL_NAME,
        pool_timeout: common.connect_timeout,
    };
    let limits = Arc::new(SessionLimits::new(common.timeout));
    let pool = common
        .pool_options::<MySql>()
        .after_connect(move |conn, _| {
            let limits = limits.clone();
            Box::pin(async move { limits.apply(conn).await })
        })
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
pub(crate) async fn from_pool(pool: MySqlPool, options: Checked) -> Result<Opened> {
    let errors = ErrorMap::of_pool(MYSQL_NAME, &pool);
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
) -> Result<Opened> {
    let t = table.as_str();
    let (h, g, e) = (
        table.companion("holders"),
        table.companion("groups"),
        table.companion("elections"),
    );
    let limit = client_limit(timeout);
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
    let driver = SqlDriver {
        pool,
        sql: statements::statements(t, &h, &g, &e),
        errors,
        capabilities: CAPABILITIES,
        writes: None,
    };
    Ok(Opened::new(driver, timeout).with_name_limit(name_limit))
}

/// Without `RETURNING`, the two statements that answer with a value answer
/// through the OK packet: `last_insert_id` and the rows matched.
impl Dialect for MySql {
    const TTL_FIRST: bool = true;

    fn rows_affected(done: &MySqlQueryResult) -> u64 {
        done.rows_affected()
    }

    async fn taken(
        pool: &MySqlPool,
        acquire: Bound<MySql>,
    ) -> Result<Option<FencingToken>, sqlx::Error> {
        let done = acquire.execute(pool).await?;
        Ok(Some(done.last_insert_id())
            .filter(|v| *v > 0)
            .map(FencingToken::new))
    }

    async fn released(pool: &MySqlPool, release: Bound<MySql>) -> Result<Released, sqlx::Error> {
        let done = release.execute(pool).await?;
        Ok(match (done.rows_affected(), done.last_insert_id()) {
            (0, _) => Released::NotOurs,
            (_, 2) => Released::InTime,
            _ => Released::Late,
        })
    }
}
