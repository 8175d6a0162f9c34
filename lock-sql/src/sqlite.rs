//! SQLite: an embedded database file shared by every process on one host.
//!
//! WAL mode lets readers and one writer proceed together; a busy timeout
//! makes a writer wait for another process's write instead of failing.
//! `synchronous=FULL` (the default here) makes every grant durable before it
//! is reported, so a power cut cannot roll a version back. With
//! `synchronous=normal` it can: WAL mode then syncs only at checkpoints, so
//! the last grants before a power cut may vanish and their versions be
//! handed out again, and the backend says its fencing is best effort.

use std::path::Path;
use std::time::Duration;

use lock_core::backend::Backoff;
use lock_core::{Capabilities, Error, Fencing, Result};
use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteQueryResult, SqliteSynchronous,
};

use crate::admission::{Admission, Put};
use crate::client::{client_limit, within};
use crate::config::Checked;
use crate::config::sqlite::Config;
use crate::driver::Opened;
use crate::error::{ErrorMap, sqlite_transient as transient};
use crate::names::SQLITE_NAME;
use crate::queue::WriteQueue;
use crate::runner::{Dialect, SqlDriver};
use crate::statements::{Join, OneRow, Statements};
use crate::table::TableName;

mod schema;
use schema::{Tables, prepare};

/// The database's clock in milliseconds since the Unix epoch. SQLite keeps
/// `'now'` fixed for the length of one statement.
const NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// Strict fencing only when every grant is synced before it is reported.
fn capabilities(synced: bool) -> Capabilities {
    let fencing = if synced {
        Fencing::Strict
    } else {
        Fencing::BestEffort
    };
    Capabilities::new(SQLITE_NAME, fencing)
        .with_serial_writes(true)
        .with_semaphores(true)
        .with_read_write(true)
        .with_elections(true)
}

/// Says plainly why a database file cannot be opened, before SQLite's terse
/// "unable to open database file" would.
fn check_directory(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let unusable = |why: &str| {
        Error::unavailable(
            SQLITE_NAME,
            format!(
                "cannot open database {}: directory {} {why}",
                path.display(),
                dir.display()
            ),
        )
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(unusable("is not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(unusable("does not exist")),
        Err(e) => Err(unusable(&format!("cannot be read ({e})"))),
    }
}

/// Opens (creating if needed) the database `config` names, with the
/// common options `common`.
pub(crate) async fn connect(config: Config, common: Checked) -> Result<Opened> {
    check_directory(&config.path)?;
    let errors = ErrorMap {
        backend: SQLITE_NAME,
        pool_timeout: common.connect_timeout,
    };
    if !common.create_tables && !config.path.exists() {
        return Err(Error::invalid_config(
            SQLITE_NAME,
            format!(
                "{}: no such database file, and create_tables=false creates none",
                config.path.display()
            ),
        ));
    }
    let options = SqliteConnectOptions::new()
        .filename(&config.path)
        .create_if_missing(common.create_tables)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(config.synchronous)
        .busy_timeout(common.timeout);
    let pool_options: SqlitePoolOptions = common.pool_options();
    // Processes that open a new file at the same moment (cron jobs of one
    // minute) race to switch it to WAL, and SQLite answers the losers
    // "database is locked" at once, without its busy handler: they try
    // again, within the connect timeout.
    let deadline = tokio::time::Instant::now() + common.connect_timeout;
    let mut backoff = Backoff::new();
    let opened = loop {
        match pool_options.clone().connect_with(options.clone()).await {
            Err(sqlx::Error::Database(db))
                if transient(&*db) && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(backoff.next_nap()).await;
            }
            other => break other,
        }
    };
    let pool = opened.map_err(|e| match e {
        sqlx::Error::Database(db) if !transient(&*db) => Error::unavailable(
            SQLITE_NAME,
            format!("cannot open database {}: {db}", config.path.display()),
        )
        .with_source(db),
        other => errors.convert("open database", other),
    })?;
    let synced = matches!(config.synchronous, SqliteSynchronous::Full);
    // SQLite's busy timeout bounds the wait for another writer.
    let (table, create) = (&common.table, common.create_tables);
    let busy = common.timeout;
    start(pool, table, common.timeout, busy, create, errors, synced).await
}

/// A backend on a pool the application made (see the crate docs). Its
/// connections' `synchronous` setting decides the fencing, as the URL's
/// does; a pool without a busy timeout works, but every statement that
/// meets another writer fails at once, so that gets a warning.
pub(crate) async fn from_pool(pool: SqlitePool, options: Checked) -> Result<Opened> {
    let errors = ErrorMap::of_pool(SQLITE_NAME, &pool);
    let limit = client_limit(options.timeout);
    let read = async {
        let mut conn = pool.acquire().await?;
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await?;
        let busy_timeout_ms: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(&mut *conn)
            .await?;
        Ok((synchronous, busy_timeout_ms))
    };
    let (synchronous, busy_timeout_ms) = within(limit, "read the pool's settings", async {
        read.await
            .map_err(|e| errors.convert("read the pool's settings", e))
    })
    .await?;
    if busy_timeout_ms == 0 {
        tracing::warn!(
            "the SQLite pool's connections have no busy timeout: every lock operation that \
             meets another writer fails at once (a retryable error) instead of waiting; set \
             SqliteConnectOptions::busy_timeout"
        );
    }
    // 2 is FULL, 3 EXTRA; below, a power cut can lose the last grants.
    let synced = synchronous >= 2;
    let (table, create) = (&options.table, options.create_tables);
    let busy = Duration::from_millis(u64::try_from(busy_timeout_ms).unwrap_or(0));
    start(pool, table, options.timeout, busy, create, errors, synced).await
}

/// Creates the tables if they are missing (or checks they are there) and
/// makes the backend.
async fn start(
    pool: SqlitePool,
    table: &TableName,
    timeout: Duration,
    busy: Duration,
    create_tables: bool,
    errors: ErrorMap,
    synced: bool,
) -> Result<Opened> {
    let t = table.as_str();
    let tables = Tables {
        locks: t,
        holders: &table.companion("holders"),
        groups: &table.companion("groups"),
        elections: &table.companion("elections"),
    };
    let limit = client_limit(timeout);
    within(
        limit,
        "create table",
        prepare(&pool, &tables, create_tables, &errors),
    )
    .await?;
    let driver = SqlDriver {
        pool,
        sql: statements(&tables),
        errors,
        capabilities: capabilities(synced),
        writes: Some(WriteQueue::new(timeout, busy)),
    };
    Ok(Opened::new(driver, timeout))
}

impl Dialect for Sqlite {
    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }
}

/// The statements of the mutex's rows in `t`, or (`valued`) of an
/// election's, whose acquire writes the candidate's value (`?4`) with the
/// grant and whose holder query answers with it.
fn one_row(t: &str, valued: bool) -> OneRow {
    let (column, value, set, read) = match valued {
        true => (", value", ", ?4", ", value = excluded.value", ", value"),
        false => Default::default(),
    };
    OneRow {
        acquire: format!(
            "INSERT INTO {t} (name, owner, version, expires_at{column}) VALUES (?1, ?2, 1, {NOW_MS} + ?3{value})
             ON CONFLICT (name) DO UPDATE SET
                version = CASE WHEN {t}.owner IS excluded.owner THEN {t}.version ELSE {t}.version + 1 END,
                owner = excluded.owner,
                expires_at = excluded.expires_at{set}
             WHERE {t}.owner IS NULL OR {t}.expires_at <= {NOW_MS} OR {t}.owner = excluded.owner
             RETURNING version"
        ),
        renew: format!(
            "UPDATE {t} SET expires_at = {NOW_MS} + ?4
             WHERE name = ?1 AND owner = ?2 AND version = ?3 AND expires_at > {NOW_MS}"
        ),
        release: format!(
            "UPDATE {t} SET owner = NULL
             WHERE name = ?1 AND owner = ?2 AND version = ?3
             RETURNING expires_at > {NOW_MS}"
        ),
        abandon: format!("UPDATE {t} SET owner = NULL WHERE name = ?1 AND owner = ?2"),
        holder: format!(
            "SELECT owner, version, expires_at - {NOW_MS}{read} FROM {t}
             WHERE name = ?1 AND owner IS NOT NULL AND expires_at > {NOW_MS}"
        ),
    }
}

fn statements(tables: &Tables<'_>) -> Statements {
    let (t, h, g, e) = (
        tables.locks,
        tables.holders,
        tables.groups,
        tables.elections,
    );
    Statements {
        mutex: one_row(t, false),
        election: one_row(e, true),
        proclaim: format!(
            "UPDATE {e} SET value = ?1
             WHERE name = ?2 AND owner = ?3 AND version = ?4 AND expires_at > {NOW_MS}"
        ),
        // `BEGIN IMMEDIATE` takes the write lock before the first read, so
        // the transaction reads every commit before it and cannot fail to
        // upgrade a stale read later; the busy timeout bounds the wait.
        join: Join::Transaction(Box::new(Admission {
            begin: "BEGIN IMMEDIATE",
            lock: format!(
                "INSERT INTO {g} (family, name, last_token) VALUES (?1, ?2, 0) ON CONFLICT DO NOTHING"
            ),
            read: format!(
                "SELECT g.last_token, h.owner, h.kind, h.token, h.expires_at - {NOW_MS}
                 FROM {g} AS g LEFT JOIN {h} AS h ON h.family = g.family AND h.name = g.name
                 WHERE g.family = ?1 AND g.name = ?2"
            ),
            prune: format!(
                "DELETE FROM {h} WHERE family = ?1 AND name = ?2 AND expires_at <= {NOW_MS}"
            ),
            extend: format!(
                "UPDATE {h} SET expires_at = {NOW_MS} + ?1 WHERE family = ?2 AND name = ?3 AND owner = ?4"
            ),
            advance: format!("UPDATE {g} SET last_token = ?1 WHERE family = ?2 AND name = ?3"),
            put: Put::new(
                format!("INSERT INTO {h} (family, name, owner, kind, token, expires_at) VALUES"),
                format!("(?, ?, ?, ?, ?, {NOW_MS} + ?)"),
                "ON CONFLICT (family, name, owner) DO UPDATE SET
                    kind = excluded.kind, token = excluded.token, expires_at = excluded.expires_at"
                    .to_owned(),
            ),
        })),
        renew_member: format!(
            "UPDATE {h} SET expires_at = {NOW_MS} + ?5
             WHERE family = ?1 AND name = ?2 AND owner = ?3 AND token = ?4 AND kind <> 'wait'
               AND expires_at > {NOW_MS}"
        ),
        leave: format!(
            "DELETE FROM {h}
             WHERE family = ?1 AND name = ?2 AND owner = ?3 AND token = ?4 AND kind <> 'wait'
               AND expires_at > {NOW_MS}"
        ),
        leave_all: format!("DELETE FROM {h} WHERE family = ?1 AND name = ?2 AND owner = ?3"),
        leave_and_admit: None,
        is_member: format!(
            "SELECT COUNT(*) FROM {h}
             WHERE family = ?1 AND name = ?2 AND owner = ?3 AND token = ?4 AND kind <> 'wait'
               AND expires_at > {NOW_MS}"
        ),
        members: format!(
            "SELECT owner, kind, token, expires_at - {NOW_MS} FROM {h}
             WHERE family = ?1 AND name = ?2 AND kind <> 'wait' AND expires_at > {NOW_MS}
             ORDER BY token"
        ),
    }
}

#[cfg(test)]
mod tests;
