//! The names lock-sql answers to: its dialects', their URL schemes, and the
//! URL options every dialect shares. A leaf, so that any module may name
//! them without naming the config or the crate root.

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

/// The URL options [`SqlConfig`](crate::SqlConfig)'s fields come from; a
/// dialect accepts them beside its own.
pub(crate) const COMMON: &[&str] = &[
    "table",
    "schema",
    "pool_size",
    "timeout",
    "connect_timeout",
    "create_tables",
];
