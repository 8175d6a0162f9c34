//! [`SqlBackend::from_pool`]: a backend on a sqlx pool the application
//! already has, and [`SqlOptions`], the URL options that still apply to one.

use std::future::Future;
use std::time::Duration;

use lock_core::{Error, Result};

use crate::backend::SqlBackend;
use crate::config::CommonOptions;
use crate::error::ErrorMap;
use crate::table::TableName;

/// How a backend made with [`SqlBackend::from_pool`] uses the database: the
/// options of a database URL that do not concern connecting (`pool_size`,
/// `connect_timeout`, TLS and `synchronous` are the pool's own business).
///
/// ```
/// use std::time::Duration;
/// use lock_sql::SqlOptions;
///
/// let options = SqlOptions::new()
///     .table("job_locks")
///     .timeout(Duration::from_secs(2));
/// ```
#[derive(Clone, Debug)]
pub struct SqlOptions {
    table: String,
    schema: Option<String>,
    timeout: Duration,
    create_tables: bool,
}

impl Default for SqlOptions {
    fn default() -> Self {
        Self {
            table: TableName::DEFAULT.to_owned(),
            schema: None,
            timeout: CommonOptions::DEFAULT_TIMEOUT,
            create_tables: true,
        }
    }
}

impl SqlOptions {
    /// The defaults: table `distlock_locks`, no schema, a 5 s timeout,
    /// tables created when missing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The locks table (URL option `table`): ASCII letters, digits and `_`,
    /// created if missing (see [`create_tables`](Self::create_tables)).
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = name.into();
        self
    }

    /// The table's schema, created if missing as the table is (URL option `schema`);
    /// PostgreSQL only: the other dialects refuse it.
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = Some(name.into());
        self
    }

    /// The longest one statement may take (URL option `timeout`); the
    /// backend gives up on it a second later. More than zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether the backend creates its tables (and, on PostgreSQL, its
    /// schema and function) when they are missing (URL option
    /// `create_tables`, default `true`). With `false` it only checks that
    /// an administrator made them, and fails naming what is missing and
    /// the statements that make it: for a role granted the use of the
    /// tables and nothing more (the crate's README, "Least privilege").
    pub fn create_tables(mut self, create: bool) -> Self {
        self.create_tables = create;
        self
    }

    /// The options, checked as a URL's are; a mistake is an
    /// [`Error::InvalidConfig`] naming the option.
    fn check(self, backend: &'static str) -> Result<Checked> {
        let schema_allowed = backend == crate::POSTGRES_NAME;
        let invalid = |reason: &str| Error::invalid_config(backend, reason);
        let table = TableName::new(&self.table, &format!("?table={}", self.table))
            .map_err(|e| e.into_config(backend))?;
        let schema = match self.schema {
            Some(_) if !schema_allowed => {
                return Err(invalid("option \"schema\" applies to PostgreSQL only"));
            }
            Some(s) => Some(
                TableName::new(&s, &format!("?schema={s}")).map_err(|e| e.into_config(backend))?,
            ),
            None => None,
        };
        if self.timeout.is_zero() {
            return Err(invalid("option \"timeout\" must be more than zero"));
        }
        Ok(Checked {
            table,
            schema,
            timeout: self.timeout,
            create_tables: self.create_tables,
        })
    }
}

/// [`SqlOptions`] that passed their checks.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) table: TableName,
    /// Only PostgreSQL has schemas; the other dialects refuse one.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) schema: Option<TableName>,
    pub(crate) timeout: Duration,
    pub(crate) create_tables: bool,
}

/// The error map for a pool the application made: its own wait for a free
/// connection.
pub(crate) fn errors<DB: sqlx::Database>(backend: &'static str, pool: &sqlx::Pool<DB>) -> ErrorMap {
    ErrorMap {
        backend,
        pool_timeout: pool.options().get_acquire_timeout(),
    }
}

/// A sqlx pool that [`SqlBackend::from_pool`] takes: `PgPool` (feature
/// `postgres`), `MySqlPool` (feature `mysql`) or `SqlitePool` (feature
/// `sqlite`). Sealed: the dialects are lock-sql's.
pub trait SqlPool: sealed::Sealed {}

mod sealed {
    use super::*;

    pub trait Sealed: Send + Sized + 'static {
        /// A backend on this pool.
        fn backend(self, options: SqlOptions) -> impl Future<Output = Result<SqlBackend>> + Send;
    }

    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::SqlitePool {
        async fn backend(self, options: SqlOptions) -> Result<SqlBackend> {
            crate::sqlite::from_pool(self, options.check(crate::SQLITE_NAME)?).await
        }
    }

    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::PgPool {
        async fn backend(self, options: SqlOptions) -> Result<SqlBackend> {
            crate::postgres::from_pool(self, options.check(crate::POSTGRES_NAME)?).await
        }
    }

    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySqlPool {
        async fn backend(self, options: SqlOptions) -> Result<SqlBackend> {
            crate::mysql::from_pool(self, options.check(crate::MYSQL_NAME)?).await
        }
    }
}

#[cfg(feature = "sqlite")]
impl SqlPool for sqlx::SqlitePool {}
#[cfg(feature = "postgres")]
impl SqlPool for sqlx::PgPool {}
#[cfg(feature = "mysql")]
impl SqlPool for sqlx::MySqlPool {}

impl SqlBackend {
    /// A backend on a pool the application already has, creating the
    /// locks table if it is missing. The pool is used as it is; see the
    /// crate docs ("Bring your own pool") for what a pool should set and
    /// what the backend still opens itself (PostgreSQL's `LISTEN`
    /// connection).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_sql::{SqlBackend, SqlOptions};
    /// use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool};
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("app.db");
    /// let pool = SqlitePool::connect_with(
    ///     SqliteConnectOptions::new()
    ///         .filename(path)
    ///         .create_if_missing(true)
    ///         .journal_mode(SqliteJournalMode::Wal),
    /// )
    /// .await
    /// .unwrap();
    /// let backend = SqlBackend::from_pool(pool.clone(), SqlOptions::new().table("job_locks")).await?;
    /// let locker = Locker::new(backend);
    /// let guard = locker.lock("nightly-report").await?;
    /// println!("fencing token {}", guard.token());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_pool<P: SqlPool>(pool: P, options: SqlOptions) -> Result<Self> {
        pool.backend(options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_config_errors_naming_the_option() {
        let (postgres, sqlite) = (crate::POSTGRES_NAME, crate::SQLITE_NAME);
        let cases = [
            (
                SqlOptions::new().table("a-b"),
                postgres,
                "table name \"a-b\"",
            ),
            (
                SqlOptions::new().schema("x y"),
                postgres,
                "table name \"x y\"",
            ),
            (SqlOptions::new().schema("s"), sqlite, "PostgreSQL only"),
            (
                SqlOptions::new().timeout(Duration::ZERO),
                postgres,
                "more than zero",
            ),
        ];
        for (options, backend, expected) in cases {
            let err = options.check(backend).unwrap_err();
            assert!(
                matches!(err, Error::InvalidConfig { backend: b, .. } if b == backend),
                "{err:?}"
            );
            assert!(err.to_string().contains(expected), "{err}");
        }
        let fine = SqlOptions::new()
            .schema("s")
            .table("t")
            .check(postgres)
            .unwrap();
        assert_eq!(fine.table.as_str(), "t");
        assert_eq!(fine.schema.unwrap().as_str(), "s");
    }
}
