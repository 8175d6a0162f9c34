//! SQLite: an embedded database file shared by every process on one host.
//!
//! WAL mode lets readers and one writer proceed together; a busy timeout
//! makes a writer wait for another process's write instead of failing.
//! `synchronous=FULL` (the default here) makes every grant durable before it
//! is reported, so a power cut cannot roll a version back. With
//! `synchronous=normal` it can: WAL mode then syncs only at checkpoints, so
//! the last grants before a power cut may vanish and their versions be
//! handed out again, and the backend says its fencing is best effort.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::{Backoff, QueryOptions};
use lock_core::{Capabilities, Error, Fencing, Result};
use sqlx::error::DatabaseError;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::admission::Admission;
use crate::backend::{SqlBackend, within};
use crate::config::{COMMON, CommonOptions};
use crate::error::ErrorMap;
use crate::pool::Checked;
use crate::returning::{Join, ReturningDriver, Statements};
use crate::table::TableName;

mod schema;
use schema::{Tables, prepare};

/// The database's clock in milliseconds since the Unix epoch. SQLite keeps
/// `'now'` fixed for the length of one statement.
const NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// The parts of a `sqlite://` URL.
#[derive(Debug)]
pub(crate) struct Config {
    path: PathBuf,
    common: CommonOptions,
    synchronous: SqliteSynchronous,
}

/// Strict fencing only when every grant is synced before it is reported.
fn capabilities(synced: bool) -> Capabilities {
    let fencing = if synced {
        Fencing::Strict
    } else {
        Fencing::BestEffort
    };
    Capabilities::new(crate::SQLITE_NAME, fencing)
        .with_serial_writes(true)
        .with_semaphores(true)
        .with_read_write(true)
}

impl Config {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| Error::invalid_url(url, "expected sqlite://PATH"))?;
        let raw_path = rest.split_once('?').map_or(rest, |(p, _)| p);
        let path: String = percent_decode(raw_path);
        if path.is_empty() {
            return Err(Error::invalid_url(
                url,
                "no database file; write sqlite://relative/path.db or sqlite:///absolute/path.db",
            ));
        }
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url)?;
        let synchronous = match q.take("synchronous").as_deref() {
            None | Some("full") => SqliteSynchronous::Full,
            Some("normal") => SqliteSynchronous::Normal,
            Some(other) => {
                return Err(Error::invalid_url(
                    url,
                    format!("option \"synchronous\" must be full or normal, got \"{other}\""),
                ));
            }
        };
        q.finish(&[COMMON, &["synchronous"]].concat())?;
        Ok(Self {
            path: PathBuf::from(path),
            common,
            synchronous,
        })
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
            crate::SQLITE_NAME,
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

pub(crate) fn transient(e: &dyn DatabaseError) -> bool {
    const BUSY: i64 = 5;
    const LOCKED: i64 = 6;
    let primary = e
        .code()
        .and_then(|c| i64::from_str(&c).ok())
        .map(|c| c & 0xff);
    matches!(primary, Some(BUSY | LOCKED))
}

/// Opens (creating if needed) the database `config` names.
pub(crate) async fn connect(config: Config) -> Result<SqlBackend> {
    check_directory(&config.path)?;
    let common = &config.common;
    let errors = ErrorMap {
        backend: crate::SQLITE_NAME,
        pool_timeout: common.connect_timeout,
    };
    if !common.create_tables && !config.path.exists() {
        return Err(Error::invalid_config(
            crate::SQLITE_NAME,
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
    let pool_options = SqlitePoolOptions::new()
        .max_connections(common.pool_size)
        // One round trip per operation: no ping before each statement. A
        // dead connection surfaces as a retryable error instead.
        .test_before_acquire(false)
        .acquire_timeout(common.connect_timeout);
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
            crate::SQLITE_NAME,
            format!("cannot open database {}: {db}", config.path.display()),
        )
        .with_source(db),
        other => errors.convert("open database", other),
    })?;
    let synced = matches!(config.synchronous, SqliteSynchronous::Full);
    // SQLite's busy timeout bounds the wait for another writer.
    let (table, create) = (&common.table, common.create_tables);
    start(pool, table, common.timeout, create, errors, synced).await
}

/// A backend on a pool the application made (see the crate docs). Its
/// connections' `synchronous` setting decides the fencing, as the URL's
/// does; a pool without a busy timeout works, but every statement that
/// meets another writer fails at once, so that gets a warning.
pub(crate) async fn from_pool(pool: SqlitePool, options: Checked) -> Result<SqlBackend> {
    let errors = crate::pool::errors(crate::SQLITE_NAME, &pool);
    let limit = SqlBackend::client_limit(options.timeout);
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
    start(pool, table, options.timeout, create, errors, synced).await
}

/// Creates the tables if they are missing (or checks they are there) and
/// makes the backend.
async fn start(
    pool: SqlitePool,
    table: &TableName,
    timeout: Duration,
    create_tables: bool,
    errors: ErrorMap,
    synced: bool,
) -> Result<SqlBackend> {
    let t = table.as_str();
    let tables = Tables {
        locks: t,
        holders: &table.companion("holders"),
        groups: &table.companion("groups"),
    };
    let limit = SqlBackend::client_limit(timeout);
    within(
        limit,
        "create table",
        prepare(&pool, &tables, create_tables, &errors),
    )
    .await?;
    let driver = ReturningDriver {
        pool,
        sql: statements(&tables),
        errors,
        capabilities: capabilities(synced),
    };
    Ok(SqlBackend::new(driver, timeout))
}

fn statements(tables: &Tables<'_>) -> Statements {
    let (t, h, g) = (tables.locks, tables.holders, tables.groups);
    Statements {
        acquire: format!(
            "INSERT INTO {t} (name, owner, version, expires_at) VALUES (?1, ?2, 1, {NOW_MS} + ?3)
             ON CONFLICT (name) DO UPDATE SET
                version = CASE WHEN {t}.owner IS excluded.owner THEN {t}.version ELSE {t}.version + 1 END,
                owner = excluded.owner,
                expires_at = excluded.expires_at
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
            "SELECT owner, version, expires_at - {NOW_MS} FROM {t}
             WHERE name = ?1 AND owner IS NOT NULL AND expires_at > {NOW_MS}"
        ),
        // `BEGIN IMMEDIATE` takes the write lock before the first read, so
        // the transaction reads every commit before it and cannot fail to
        // upgrade a stale read later; the busy timeout bounds the wait.
        join: Join::Transaction(Admission {
            begin: "BEGIN IMMEDIATE",
            lock: format!(
                "INSERT INTO {g} (family, name, last_token) VALUES (?1, ?2, 0) ON CONFLICT DO NOTHING"
            ),
            read: format!(
                "SELECT g.last_token, h.owner, h.kind, h.token, h.expires_at - {NOW_MS}
                 FROM {g} AS g LEFT JOIN {h} AS h ON h.family = g.family AND h.name = g.name
                 WHERE g.family = ?1 AND g.name = ?2"
            ),
            prune: format!("DELETE FROM {h} WHERE family = ?1 AND name = ?2 AND expires_at <= {NOW_MS}"),
            extend: format!(
                "UPDATE {h} SET expires_at = {NOW_MS} + ?1 WHERE family = ?2 AND name = ?3 AND owner = ?4"
            ),
            advance: format!("UPDATE {g} SET last_token = ?1 WHERE family = ?2 AND name = ?3"),
            put: format!(
                "INSERT INTO {h} (family, name, owner, kind, token, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, {NOW_MS} + ?6)
                 ON CONFLICT (family, name, owner) DO UPDATE SET
                    kind = excluded.kind, token = excluded.token, expires_at = excluded.expires_at"
            ),
        }),
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
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn urls_name_a_file_and_known_options() {
        let c = Config::parse("sqlite://dir/x.db?table=t1&timeout=2s&synchronous=normal").unwrap();
        assert_eq!(c.path, PathBuf::from("dir/x.db"));
        assert_eq!(c.common.table.as_str(), "t1");
        assert_eq!(c.common.timeout, Duration::from_secs(2));
        assert_eq!(
            Config::parse("sqlite:///tmp/a%20b.db").unwrap().path,
            PathBuf::from("/tmp/a b.db")
        );
        assert_eq!(
            Config::parse("sqlite:x.db").unwrap().path,
            PathBuf::from("x.db")
        );
    }

    #[test]
    fn bad_urls_say_what_is_accepted() {
        let cases = [
            ("sqlite://", "no database file"),
            ("sqlite://x.db?tabel=t", "accepted options: table"),
            ("sqlite://x.db?table=a;b", "table name"),
            ("sqlite://x.db?timeout=0s", "more than zero"),
            ("sqlite://x.db?timeout=5", "no unit"),
            ("sqlite://x.db?synchronous=off", "full or normal"),
            ("sqlite://x.db?pool_size=0", "from 1 to 64"),
            ("sqlite://x.db?create_tables=no", "true or false"),
        ];
        lock_core::url::assert_refused(Config::parse, &cases);
    }

    #[tokio::test]
    async fn fencing_is_strict_only_when_every_grant_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("", Fencing::Strict),
            ("?synchronous=full", Fencing::Strict),
            ("?synchronous=normal", Fencing::BestEffort),
            (
                "?table=t2&synchronous=normal&timeout=2s",
                Fencing::BestEffort,
            ),
        ];
        for (query, fencing) in cases {
            let url = format!("sqlite://{}/locks.db{query}", dir.path().display());
            let backend = SqlBackend::connect(&url).await.unwrap();
            let capabilities = lock_core::LockBackend::capabilities(&backend);
            assert_eq!(capabilities.fencing, fencing, "{url}");
        }
    }

    #[tokio::test]
    async fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/missing/x.db", dir.path().display());
        let err = SqlBackend::connect(&url).await.unwrap_err().to_string();
        assert!(
            err.contains("does not exist") && err.contains("missing"),
            "{err}"
        );
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        let err = SqlBackend::connect(&format!("sqlite://{}/x.db", file.display()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
    }

    #[tokio::test]
    async fn without_create_tables_missing_tables_are_named_and_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/x.db?table=t3", dir.path().display());
        // An empty file is an empty database.
        std::fs::write(dir.path().join("x.db"), "").unwrap();
        let err = SqlBackend::connect(&format!("{url}&create_tables=false"))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, lock_core::Error::InvalidConfig { .. }),
            "{text}"
        );
        for expected in [
            "table t3,",
            "t3_holders",
            "CREATE TABLE IF NOT EXISTS t3_groups",
        ] {
            assert!(text.contains(expected), "{expected:?} not in {text}");
        }
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}/x.db", dir.path().display()))
            .await
            .unwrap();
        let options = crate::SqlOptions::new().table("t3").create_tables(false);
        let err = SqlBackend::from_pool(pool.clone(), options)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("table t3,"), "{err}");
        let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlite_master")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(tables, 0, "create_tables=false made a table");
        SqlBackend::connect(&url)
            .await
            .expect("made with create_tables=true");
        SqlBackend::connect(&format!("{url}&create_tables=false"))
            .await
            .expect("found once made");
        let missing = format!(
            "sqlite://{}/none.db?create_tables=false",
            dir.path().display()
        );
        let err = SqlBackend::connect(&missing).await.unwrap_err();
        assert!(err.to_string().contains("no such database file"), "{err}");
        assert!(!dir.path().join("none.db").exists(), "a file was made");
    }
}
