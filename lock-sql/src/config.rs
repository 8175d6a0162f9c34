//! Database URL → [`SqlConfig`]: the options every dialect shares, public,
//! and the connection a URL names (its dialect and sqlx's options), private.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::url::check_positive;
use lock_core::{Error, Result};

use crate::names::{self, POSTGRES_NAME, SCHEMES};
use crate::table::TableName;

#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod server;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// Everything a [`SqlBackend`](crate::SqlBackend) is made from: the database, which only
/// [`from_url`](Self::from_url) (or `str::parse`) names, and the options
/// every dialect shares, public fields with setters of the same names.
/// Either way they are checked when the backend is made, so a field
/// changed after parsing is checked too, and what the server is told is
/// worked out from the fields then (PostgreSQL's `statement_timeout`,
/// MySQL's session limits, SQLite's busy timeout, the pool's size):
/// changing [`timeout`](Self::timeout) after `from_url` takes effect.
///
/// [`Default`] names no database: [`SqlBackend::connect_with`](crate::SqlBackend::connect_with) refuses it
/// (`Error::InvalidConfig`, saying to name one with `from_url`). There is
/// no database every build could default to (each dialect is a feature),
/// and a library that made `distlock.db` in whatever directory it runs in
/// would surprise more than it helps; the defaults are for
/// [`SqlBackend::from_pool`](crate::SqlBackend::from_pool), which needs no database named.
///
/// ```
/// use std::time::Duration;
/// use lock_sql::SqlConfig;
///
/// let config = SqlConfig::from_url("sqlite://locks.db")?
///     .table("job_locks")
///     .timeout(Duration::from_secs(2));
/// let same: SqlConfig = "sqlite://locks.db?table=job_locks&timeout=2s".parse()?;
/// assert_eq!(format!("{config:?}"), format!("{same:?}"));
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct SqlConfig {
    /// The locks table (`table`, default `distlock_locks`): 1 to 63 ASCII
    /// letters, digits or `_`, not starting with a digit. Its companions
    /// (`<table>_holders`, `<table>_groups`) are named after it.
    pub table: String,
    /// The schema of the tables, created if missing as they are (`schema`,
    /// default none: the search path); PostgreSQL only, the other dialects
    /// refuse it. The same rules as `table`.
    pub schema: Option<String>,
    /// Connections per backend instance (`pool_size`, 1 to 64, default 4;
    /// PostgreSQL adds one for `LISTEN`).
    pub pool_size: u32,
    /// The longest one statement may take on the server, waiting for row
    /// locks included (`timeout`, default 5 s); the client gives up one
    /// second later. More than zero.
    pub timeout: Duration,
    /// The longest wait for a connection, new or pooled (`connect_timeout`,
    /// default 5 s). More than zero.
    pub connect_timeout: Duration,
    /// Whether the backend creates its tables (and, on PostgreSQL, its
    /// schema and function) when they are missing (`create_tables`, default
    /// `true`); with `false` it only checks that they are there, and fails
    /// naming what is missing and the statements that make it.
    pub create_tables: bool,
    /// The database a URL named, `None` for [`Default`].
    connection: Connection,
}

/// The database a URL names, as its dialect reads it.
#[derive(Clone, Debug)]
pub(crate) enum Connection {
    None,
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::Config),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Config>),
    #[cfg(feature = "mysql")]
    MySql(Box<mysql::Config>),
}

impl Default for SqlConfig {
    fn default() -> Self {
        Self {
            table: TableName::DEFAULT.to_owned(),
            schema: None,
            pool_size: 4,
            timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Self::DEFAULT_TIMEOUT,
            create_tables: true,
            connection: Connection::None,
        }
    }
}

impl SqlConfig {
    const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Reads a database URL, with the same checks as
    /// [`SqlBackend::connect_with`](crate::SqlBackend::connect_with) makes; a mistake is an
    /// [`Error::InvalidUrl`]. The schemes accepted depend on the features
    /// compiled in (see [`SCHEMES`](crate::SCHEMES)).
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or(url, |(s, _)| s);
        type Parse = fn(&str, QueryOptions) -> Result<Connection>;
        let parse: Parse = match scheme {
            #[cfg(feature = "sqlite")]
            s if names::SQLITE_SCHEMES.contains(&s) => {
                |url, q| sqlite::Config::parse(url, q).map(Connection::Sqlite)
            }
            #[cfg(feature = "postgres")]
            s if names::POSTGRES_SCHEMES.contains(&s) => {
                |url, q| postgres::Config::parse(url, q).map(|c| Connection::Postgres(c.into()))
            }
            #[cfg(feature = "mysql")]
            s if names::MYSQL_SCHEMES.contains(&s) => {
                |url, q| mysql::Config::parse(url, q).map(|c| Connection::MySql(c.into()))
            }
            _ => {
                return Err(Error::unknown_scheme(scheme.to_owned(), SCHEMES.to_vec()));
            }
        };
        let mut q = QueryOptions::parse(url)?;
        let mut config = Self::default();
        config.take_common(&mut q)?;
        config.connection = parse(url, q)?;
        let dialect = config.dialect()?;
        config.check(dialect).map_err(|e| e.into_url(url))?;
        Ok(config)
    }

    /// Takes the common options out of `q`, as written: their ranges are
    /// [`check`](Self::check)'s.
    fn take_common(&mut self, q: &mut QueryOptions) -> Result<()> {
        if let Some(table) = q.take("table") {
            self.table = table;
        }
        self.schema = q.take("schema");
        let pool_size = q.take_parsed::<u32>("pool_size", "a whole number from 1 to 64")?;
        self.pool_size = pool_size.unwrap_or(self.pool_size);
        self.timeout = q.take_duration("timeout")?.unwrap_or(self.timeout);
        let connect_timeout = q.take_duration("connect_timeout")?;
        self.connect_timeout = connect_timeout.unwrap_or(self.connect_timeout);
        self.create_tables = q.take_bool("create_tables", self.create_tables)?;
        Ok(())
    }

    lock_core::setters! {
        /// The locks table (URL option `table`).
        table: into String;
    }

    /// The tables' schema (URL option `schema`); PostgreSQL only.
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = Some(name.into());
        self
    }

    lock_core::setters! {
        /// Connections per backend instance (URL option `pool_size`), 1 to 64.
        pool_size: u32;
        /// The longest one statement may take on the server (URL option
        /// `timeout`); more than zero.
        timeout: Duration;
        /// The longest wait for a connection (URL option `connect_timeout`);
        /// more than zero.
        connect_timeout: Duration;
        /// Whether missing tables are created (URL option `create_tables`): see
        /// the crate's README, "Least privilege", for a role that may not.
        create_tables: bool;
    }

    /// The name of the dialect the URL named, or the error of a config
    /// that names no database.
    fn dialect(&self) -> Result<&'static str> {
        match self.connection {
            Connection::None => Err(Error::invalid_config(
                "sql",
                "no database named: make the config with SqlConfig::from_url(\"sqlite://…\", \
                 \"postgres://…\" or \"mysql://…\")",
            )),
            #[cfg(feature = "sqlite")]
            Connection::Sqlite(_) => Ok(names::SQLITE_NAME),
            #[cfg(feature = "postgres")]
            Connection::Postgres(_) => Ok(POSTGRES_NAME),
            #[cfg(feature = "mysql")]
            Connection::MySql(_) => Ok(names::MYSQL_NAME),
        }
    }

    /// The one check of every common field, whether it came from a URL or
    /// from code, for `dialect` (the schema is PostgreSQL's only); a mistake
    /// is an [`Error::InvalidConfig`] of `dialect` naming the option.
    pub(crate) fn check(&self, dialect: &'static str) -> Result<Checked> {
        let name = |option: &str, name: &str| {
            TableName::new(name, "").map_err(|e| {
                Error::invalid_config(dialect, format!("option \"{option}\": {}", reason(e)))
            })
        };
        let table = name("table", &self.table)?;
        let schema = match &self.schema {
            Some(_) if dialect != POSTGRES_NAME => {
                return Err(Error::invalid_config(
                    dialect,
                    "option \"schema\" applies to PostgreSQL only",
                ));
            }
            Some(schema) => Some(name("schema", schema)?),
            None => None,
        };
        if !(1..=64).contains(&self.pool_size) {
            return Err(Error::invalid_config(
                dialect,
                "option \"pool_size\" must be from 1 to 64",
            ));
        }
        check_positive(
            dialect,
            &[
                ("timeout", self.timeout),
                ("connect_timeout", self.connect_timeout),
            ],
        )?;
        Ok(Checked {
            table,
            schema,
            pool_size: self.pool_size,
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            create_tables: self.create_tables,
        })
    }

    /// Checks the config: the database it names and its checked fields,
    /// what connecting takes.
    pub(crate) fn into_parts(self) -> Result<(Connection, Checked)> {
        let checked = self.check(self.dialect()?)?;
        Ok((self.connection, checked))
    }
}

/// The reason of an error, without what it was about.
fn reason(e: Error) -> String {
    match e {
        Error::InvalidUrl { reason, .. } | Error::InvalidConfig { reason, .. } => reason,
        e => e.to_string(),
    }
}

impl FromStr for SqlConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        Self::from_url(url)
    }
}

/// The fields and the database; never a password (a URL's shows as `***`,
/// and sqlx's connect options, whose `Debug` prints it, are not shown).
impl fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlConfig")
            .field("database", &self.connection)
            .field("table", &self.table)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("create_tables", &self.create_tables)
            .finish()
    }
}

/// A [`SqlConfig`]'s common fields that passed [`SqlConfig::check`].
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) table: TableName,
    /// Only PostgreSQL has schemas; the other dialects refuse one.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) schema: Option<TableName>,
    pub(crate) pool_size: u32,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) create_tables: bool,
}

impl Checked {
    /// The pool every dialect opens: `pool_size` connections, each waited
    /// for at most `connect_timeout`, and one round trip per operation (no
    /// ping before each statement: a dead connection surfaces as a
    /// retryable error instead).
    pub(crate) fn pool_options<DB: sqlx::Database>(&self) -> sqlx::pool::PoolOptions<DB> {
        sqlx::pool::PoolOptions::new()
            .max_connections(self.pool_size)
            .test_before_acquire(false)
            .acquire_timeout(self.connect_timeout)
    }
}

#[cfg(test)]
mod tests;
