#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
mod driver;
mod errors;
#[cfg(feature = "mysql")]
mod mysql;
mod options;
mod orphans;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod returning;
#[cfg(feature = "sqlite")]
mod sqlite;
mod table;

pub use backend::SqlBackend;
pub use errors::is_transient;
pub use options::CommonOptions;
pub use table::TableName;

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
