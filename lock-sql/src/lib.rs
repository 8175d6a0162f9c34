#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

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
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub use config::CommonOptions;
pub use config::SqlConfig;
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub use error::is_transient;
pub use pool::{SqlOptions, SqlPool};
pub use table::TableName;

pub use config::{
    MYSQL_NAME, MYSQL_SCHEMES, POSTGRES_NAME, POSTGRES_SCHEMES, SCHEMES, SQLITE_NAME,
    SQLITE_SCHEMES,
};

/// The `sqlx` crate whose pools [`SqlBackend::from_pool`] takes, at the version it was built with.
pub use sqlx;
