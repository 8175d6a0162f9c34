//! Database URL → [`SqlConfig`]: the dialect, and the options every dialect
//! accepts.

use std::time::Duration;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::{fmt, path::PathBuf};

use lock_core::backend::QueryOptions;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use lock_core::secret::Password;
use lock_core::{Error, Result};

use crate::backend::SqlBackend;
use crate::table::TableName;

/// A parsed database URL: its dialect and options, for
/// [`SqlBackend::connect_with`].
#[derive(Debug)]
pub struct SqlConfig(Dialect);

#[derive(Debug)]
enum Dialect {
    #[cfg(feature = "sqlite")]
    Sqlite(crate::sqlite::Config),
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::Config),
    #[cfg(feature = "mysql")]
    MySql(crate::mysql::Config),
}

impl SqlConfig {
    /// Parses a database URL. The schemes accepted depend on the features
    /// compiled in (see [`SCHEMES`](crate::SCHEMES)).
    pub fn parse(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or(url, |(s, _)| s);
        Ok(Self(match scheme {
            #[cfg(feature = "sqlite")]
            s if crate::SQLITE_SCHEMES.contains(&s) => {
                Dialect::Sqlite(crate::sqlite::Config::parse(url)?)
            }
            #[cfg(feature = "postgres")]
            s if crate::POSTGRES_SCHEMES.contains(&s) => {
                Dialect::Postgres(crate::postgres::Config::parse(url)?)
            }
            #[cfg(feature = "mysql")]
            s if crate::MYSQL_SCHEMES.contains(&s) => {
                Dialect::MySql(crate::mysql::Config::parse(url)?)
            }
            _ => {
                return Err(Error::unknown_scheme(
                    scheme.to_owned(),
                    crate::SCHEMES.to_vec(),
                ));
            }
        }))
    }

    pub(crate) async fn connect(self) -> Result<SqlBackend> {
        match self.0 {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite(c) => crate::sqlite::connect(c).await,
            #[cfg(feature = "postgres")]
            Dialect::Postgres(c) => crate::postgres::connect(c).await,
            #[cfg(feature = "mysql")]
            Dialect::MySql(c) => crate::mysql::connect(c).await,
        }
    }
}

/// The option names [`CommonOptions::take`] reads.
pub(crate) const COMMON: &[&str] = &[
    "table",
    "pool_size",
    "timeout",
    "connect_timeout",
    "create_tables",
];

/// Options every SQL dialect shares, with their defaults. Public with the
/// `raw` feature, so that whatever must open a database exactly as lock-sql
/// does (`distlock bench`'s floors) reads them the same way.
#[derive(Debug)]
#[non_exhaustive]
pub struct CommonOptions {
    /// The locks table.
    pub table: TableName,
    /// Connections per backend instance.
    pub pool_size: u32,
    /// The longest one statement may take on the server, waiting for locks
    /// included (the client waits a second longer).
    pub timeout: Duration,
    /// The longest wait for a connection, new or pooled.
    pub connect_timeout: Duration,
    /// Whether the backend creates its tables when they are missing
    /// (`create_tables`, default `true`); when `false` it only checks that
    /// they are there, for a role that may not create them.
    pub create_tables: bool,
}

impl CommonOptions {
    const DEFAULT_POOL_SIZE: u32 = 4;
    pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Takes the common options out of `q` (`url` is for error messages).
    pub fn take(q: &mut QueryOptions, url: &str) -> Result<Self> {
        let table = match q.take("table") {
            Some(t) => TableName::new(&t, url)?,
            None => TableName::default(),
        };
        let pool_size = q
            .take_parsed::<u32>("pool_size", "a whole number from 1 to 64")?
            .unwrap_or(Self::DEFAULT_POOL_SIZE);
        if !(1..=64).contains(&pool_size) {
            return Err(Error::invalid_url(
                url,
                "option \"pool_size\" must be from 1 to 64",
            ));
        }
        let timeout = q.take_positive_duration("timeout", Self::DEFAULT_TIMEOUT)?;
        let connect_timeout = q.take_positive_duration("connect_timeout", Self::DEFAULT_TIMEOUT)?;
        let create_tables = q.take_bool("create_tables", true)?;
        Ok(Self {
            table,
            pool_size,
            timeout,
            connect_timeout,
            create_tables,
        })
    }
}

/// Splits `url` into the part before `?` and the query pairs whose keys are
/// in `passthrough`, rebuilt for the driver (its TLS options, say).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn driver_url(url: &str, q: &mut QueryOptions, passthrough: &[&str]) -> String {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    let mut forwarded = form_urlencoded::Serializer::new(String::new());
    for key in passthrough {
        if let Some(value) = q.take(key) {
            forwarded.append_pair(key, &value);
        }
    }
    let query = forwarded.finish();
    if query.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{query}")
    }
}

/// The password file named by `password_file`, read when the backend
/// connects; refused beside a password in the URL's user-info.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn password_file(url: &str, q: &mut QueryOptions) -> Result<Option<PathBuf>> {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    let authority = base
        .split_once("://")
        .map_or("", |(_, rest)| rest.split('/').next().unwrap_or_default());
    let given = authority
        .rsplit_once('@')
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password.to_owned());
    Ok(match Password::from_query(q, given)? {
        Some(Password::File(path)) => Some(path),
        _ => None,
    })
}

/// What every server dialect reads from its URL beside sqlx's own
/// options: the common options, the password file and TLS, and the URL
/// without its password, which is all its `Debug` shows (sqlx's connect
/// options print the password).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) struct ServerOptions {
    pub(crate) common: CommonOptions,
    pub(crate) redacted: String,
    pub(crate) password_file: Option<PathBuf>,
    pub(crate) tls: crate::tls::Tls,
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl ServerOptions {
    /// Takes them from `q`, the query of `url`, whose dialect has taken its
    /// own options (`own`, listed as accepted) already. `driver_tls` are the
    /// dialect's TLS names, refused beside the shared ones; `passthrough`
    /// are handed to sqlx in the URL returned with them. Any option left is
    /// an error.
    pub(crate) fn take(
        url: &str,
        mut q: QueryOptions,
        own: &[&str],
        driver_tls: &[&str],
        passthrough: &[&str],
    ) -> Result<(Self, String)> {
        let common = CommonOptions::take(&mut q, url)?;
        let password_file = password_file(url, &mut q)?;
        let tls = crate::tls::Tls::take(&mut q, url, driver_tls)?;
        let sqlx_url = driver_url(url, &mut q, passthrough);
        q.finish(
            &[
                COMMON,
                own,
                &[lock_core::secret::PASSWORD_FILE],
                &lock_core::tls::TlsOptions::URL_OPTIONS,
                passthrough,
            ]
            .concat(),
        )?;
        let server = Self {
            common,
            redacted: lock_core::url::redact(url),
            password_file,
            tls,
        };
        Ok((server, sqlx_url))
    }

    /// `Debug` of the dialect's config named `name`.
    pub(crate) fn fmt(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("url", &self.redacted)
            .field("common", &self.common)
            .field("password_file", &self.password_file.as_deref())
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// `timeout` in whole `unit`s for a server-side limit: rounded up, since a
/// limit of zero means none to every server here, and at most `max`, the
/// largest the server accepts.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn server_limit(timeout: Duration, unit: Duration, max: u128) -> u128 {
    timeout.as_nanos().div_ceil(unit.as_nanos()).clamp(1, max)
}

/// SQLite's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and error
/// messages give it.
pub const SQLITE_NAME: &str = "sqlite";
/// SQLite's URL schemes (whether or not the `sqlite` feature is on).
pub const SQLITE_SCHEMES: &[&str] = &["sqlite"];
/// PostgreSQL's name.
pub const POSTGRES_NAME: &str = "postgres";
/// PostgreSQL's URL schemes (whether or not the `postgres` feature is on).
pub const POSTGRES_SCHEMES: &[&str] = &["postgres", "postgresql"];
/// MySQL's and MariaDB's name.
pub const MYSQL_NAME: &str = "mysql";
/// MySQL's and MariaDB's URL schemes (whether or not the `mysql` feature is
/// on).
pub const MYSQL_SCHEMES: &[&str] = &["mysql", "mariadb"];

/// The URL schemes this build of lock-sql accepts: those of each dialect
/// whose feature is on.
pub const SCHEMES: &[&str] = &[
    #[cfg(feature = "sqlite")]
    SQLITE_SCHEMES[0],
    #[cfg(feature = "postgres")]
    POSTGRES_SCHEMES[0],
    #[cfg(feature = "postgres")]
    POSTGRES_SCHEMES[1],
    #[cfg(feature = "mysql")]
    MYSQL_SCHEMES[0],
    #[cfg(feature = "mysql")]
    MYSQL_SCHEMES[1],
];
