#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "sqlite", feature = "mysql"))]
mod admission;
mod backend;
mod client;
mod config;
mod driver;
mod error;
mod groups;
mod handover;
#[cfg(feature = "mysql")]
mod mysql;
mod names;
mod orphans;
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
mod provision;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod queue;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod runner;
mod signals;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod statements;
mod table;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod tls;

pub use backend::SqlBackend;
pub use config::SqlConfig;
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub use error::is_transient;
pub use names::{
    MYSQL_NAME, MYSQL_SCHEMES, POSTGRES_NAME, POSTGRES_SCHEMES, SCHEMES, SQLITE_NAME,
    SQLITE_SCHEMES,
};
pub use pool::SqlPool;
pub use table::TableName;
#[cfg(all(
    feature = "raw",
    any(feature = "sqlite", feature = "postgres", feature = "mysql")
))]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub use {driver::Released, runner::Bound, runner::Dialect};

/// The `sqlx` crate whose pools [`SqlBackend::from_pool`] takes, at the version it was built with.
pub use sqlx;
