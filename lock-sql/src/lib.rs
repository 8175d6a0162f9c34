#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
mod config;
mod driver;
mod error;
#[cfg(feature = "mysql")]
mod mysql;
mod orphans;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod returning;
#[cfg(feature = "sqlite")]
mod sqlite;
mod table;

pub use backend::SqlBackend;
#[cfg(feature = "raw")]
pub use config::CommonOptions;
pub use config::SqlConfig;
#[cfg(feature = "raw")]
pub use error::is_transient;
pub use table::TableName;

/// The schemes of SQLite (whether or not the `sqlite` feature is on).
pub const SQLITE_SCHEMES: &[&str] = &["sqlite"];
/// The schemes of PostgreSQL (whether or not the `postgres` feature is on).
pub const POSTGRES_SCHEMES: &[&str] = &["postgres", "postgresql"];
/// The schemes of MySQL and MariaDB (whether or not the `mysql` feature is
/// on).
pub const MYSQL_SCHEMES: &[&str] = &["mysql", "mariadb"];

/// The URL schemes this build of lock-sql accepts.
pub const SCHEMES: &[&str] = &[
    #[cfg(feature = "sqlite")]
    "sqlite",
    #[cfg(feature = "postgres")]
    "postgres",
    #[cfg(feature = "postgres")]
    "postgresql",
    #[cfg(feature = "mysql")]
    "mysql",
    #[cfg(feature = "mysql")]
    "mariadb",
];
