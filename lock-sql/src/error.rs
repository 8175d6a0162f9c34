//! Turning `sqlx` errors into distlock errors that say whether a retry helps.

use std::time::Duration;

use lock_core::Error;
use sqlx::error::DatabaseError;

/// Whether a retry may get past `e`: a dropped or refused connection, an
/// exhausted pool, or a database error its dialect calls transient (lock
/// contention, a deadlock, a server shutting down). Every error
/// [`SqlBackend`](crate::SqlBackend) reports as retryable is one of these;
/// code that drives sqlx beside it (the benchmark's floors) judges errors
/// the same way with this (feature `raw`).
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => transient_database_error(&**db),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::PoolTimedOut => true,
        _ => false,
    }
}

/// Whether `e` is a database's own transient error (SQLite: busy or
/// locked, another writer holding the database).
pub(crate) fn busy(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if transient_database_error(&**db))
}

/// The transient rule of the dialect `db` comes from.
fn transient_database_error(db: &dyn DatabaseError) -> bool {
    #[cfg(feature = "sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return sqlite_transient(db);
    }
    #[cfg(feature = "postgres")]
    if db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        return postgres_transient(db);
    }
    #[cfg(feature = "mysql")]
    if db
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some()
    {
        return mysql_transient(db);
    }
    false
}

/// SQLite's busy and locked, whatever their extended code.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_transient(e: &dyn DatabaseError) -> bool {
    const BUSY: i64 = 5;
    const LOCKED: i64 = 6;
    let primary = e
        .code()
        .and_then(|c| c.parse::<i64>().ok())
        .map(|c| c & 0xff);
    matches!(primary, Some(BUSY | LOCKED))
}

#[cfg(feature = "postgres")]
fn postgres_transient(e: &dyn DatabaseError) -> bool {
    // Class 08 (connection), 40 (serialization/deadlock), 53 (resources),
    // 57 (operator intervention: shutdown, statement timeout).
    e.code().is_some_and(|c| {
        ["08", "40", "53", "57"]
            .iter()
            .any(|class| c.starts_with(class))
    })
}

#[cfg(feature = "mysql")]
fn mysql_transient(e: &dyn DatabaseError) -> bool {
    // 1205 lock wait timeout, 1969 statement time exceeded (MariaDB),
    // 1213 deadlock, 1040 too many connections, 1053 server shutdown,
    // 2006/2013 server gone / lost connection.
    const CODES: &[&str] = &["1205", "1969", "1213", "1040", "1053", "2006", "2013"];
    let code = e
        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|m| m.number().to_string());
    code.is_some_and(|c| CODES.contains(&c.as_str()))
}

/// How one dialect reads `sqlx` errors.
#[derive(Debug)]
pub(crate) struct ErrorMap {
    /// The backend's name in messages.
    pub(crate) backend: &'static str,
    /// How long a statement waits for a free pooled connection.
    pub(crate) pool_timeout: Duration,
}

impl ErrorMap {
    /// The error map for a pool the application made: its own wait for a
    /// free connection.
    pub(crate) fn of_pool<DB: sqlx::Database>(
        backend: &'static str,
        pool: &sqlx::Pool<DB>,
    ) -> Self {
        Self {
            backend,
            pool_timeout: pool.options().get_acquire_timeout(),
        }
    }

    /// Converts an error from `operation`.
    pub(crate) fn convert(&self, operation: &'static str, e: sqlx::Error) -> Error {
        match e {
            // A certificate refused by either side is a setting to fix:
            // retrying cannot help.
            sqlx::Error::Io(_) | sqlx::Error::Tls(_) if refused_certificate(&e) => {
                Error::invalid_config(self.backend, format!("TLS: {operation}: {e}"))
            }
            sqlx::Error::Database(db) if transient_database_error(&*db) => {
                Error::unavailable(self.backend, format!("{operation}: {db}")).with_source(db)
            }
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => {
                Error::unavailable(self.backend, format!("{operation}: {e}")).with_source(e)
            }
            sqlx::Error::PoolTimedOut => {
                Error::timeout("waiting for a free database connection", self.pool_timeout)
            }
            other => Error::backend(format!(
                "{} {operation}: {other}{}",
                self.backend,
                hint(operation, &other)
            ))
            .with_source(other),
        }
    }
}

/// Whether `e` is a TLS handshake that failed on a certificate: ours
/// refused by the server (an alert) or the server's refused by us.
fn refused_certificate(e: &sqlx::Error) -> bool {
    let text = e.to_string();
    ["invalid peer certificate", "fatal alert", "certificate"]
        .iter()
        .any(|cause| text.contains(cause))
}

/// What an error may mean beyond the server's words. MariaDB and MySQL
/// say only "access denied" (SQLSTATE 28000) to a user created `REQUIRE
/// SSL` or `REQUIRE X509` who came without TLS or a certificate, and
/// "command denied" both for a table the user has no rights on and for one
/// that does not exist; a user refused the right to create tables may
/// still use tables an administrator made.
fn hint(operation: &str, e: &sqlx::Error) -> &'static str {
    let sqlx::Error::Database(db) = e else {
        return "";
    };
    if undefined_table(&**db) {
        " (a table that does not exist: one made by connecting with create_tables=true, or by an administrator; a database set up by a lock-sql that kept no elections lacks the elections table: lock-sql's README, \"Elections\")"
    } else if db.code().as_deref() == Some("28000") {
        " (a wrong user or password, or a user the server admits only over TLS or with a client certificate: see tls, tls_ca, tls_cert and tls_key)"
    } else if !insufficient_privilege(&**db) {
        ""
    } else if operation == "connect" {
        " (a user without rights on this database)"
    } else if operation == "create table" {
        " (a user without the right to create tables: have an administrator make them, and connect with create_tables=false; lock-sql's README, \"Least privilege\")"
    } else {
        " (a user without rights on the locks tables, or tables that do not exist: lock-sql's README, \"Least privilege\")"
    }
}

/// A table that is not there: PostgreSQL's SQLSTATE 42P01, MySQL's and
/// MariaDB's 1146, SQLite's "no such table". With `create_tables=false`
/// that is, after the start's check, the elections table of a database an
/// earlier lock-sql set up.
fn undefined_table(db: &dyn DatabaseError) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(e) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return e.number() == 1146;
    }
    db.code().as_deref() == Some("42P01") || db.message().starts_with("no such table")
}

/// PostgreSQL's SQLSTATE 42501, or MySQL's and MariaDB's "command denied"
/// errors (1142 on a table, 1044 on a database).
fn insufficient_privilege(db: &dyn DatabaseError) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(e) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return [1142, 1044].contains(&e.number());
    }
    db.code().as_deref() == Some("42501")
}
