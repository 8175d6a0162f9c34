#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(any(feature = "sqlite", feature = "mysql"))]
mod admission;
mod backend;
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
mod config;
mod driver;
mod error;
mod groups;
#[cfg(feature = "mysql")]
mod mysql;
mod orphans;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
mod provision;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod returning;
mod signals;
#[cfg(feature = "sqlite")]
mod sqlite;
mod table;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod tls;

pub use backend::SqlBackend;
#[cfg(feature = "raw")]
pub use config::CommonOptions;
pub use config::SqlConfig;
#[cfg(feature = "raw")]
pub use error::is_transient;
pub use pool::{SqlOptions, SqlPool};
pub use table::TableName;

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
