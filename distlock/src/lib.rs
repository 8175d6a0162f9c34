#![doc = include_str!("../../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod connect;

pub use connect::{SCHEMES, connect, connect_backend};
pub use lock_core::*;

/// The SQL backend (SQLite, and PostgreSQL and MySQL as they land).
#[cfg(feature = "sqlite")]
pub use lock_sql;
