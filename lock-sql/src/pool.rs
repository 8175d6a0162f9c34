//! [`SqlPool`]: the sqlx pools [`SqlBackend::from_pool`](crate::SqlBackend::from_pool)
//! takes, each opened by its own dialect with the [`SqlConfig`] fields that
//! still apply to a pool the application made.

use std::future::Future;

use lock_core::Result;

use crate::config::SqlConfig;
use crate::driver::Opened;

/// A sqlx pool that [`SqlBackend::from_pool`](crate::SqlBackend::from_pool)
/// takes: `PgPool` (feature `postgres`), `MySqlPool` (feature `mysql`) or
/// `SqlitePool` (feature `sqlite`). Sealed: the dialects are lock-sql's.
pub trait SqlPool: sealed::Sealed {}

mod sealed {
    use super::*;

    pub trait Sealed: Send + Sized + 'static {
        /// What the backend on this pool is made from.
        fn open(self, config: SqlConfig) -> impl Future<Output = Result<Opened>> + Send;
    }

    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::SqlitePool {
        async fn open(self, config: SqlConfig) -> Result<Opened> {
            crate::sqlite::from_pool(self, config.check(crate::names::SQLITE_NAME)?).await
        }
    }

    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::PgPool {
        async fn open(self, config: SqlConfig) -> Result<Opened> {
            crate::postgres::from_pool(self, config.check(crate::names::POSTGRES_NAME)?).await
        }
    }

    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySqlPool {
        async fn open(self, config: SqlConfig) -> Result<Opened> {
            crate::mysql::from_pool(self, config.check(crate::names::MYSQL_NAME)?).await
        }
    }
}

#[cfg(feature = "sqlite")]
impl SqlPool for sqlx::SqlitePool {}
#[cfg(feature = "postgres")]
impl SqlPool for sqlx::PgPool {}
#[cfg(feature = "mysql")]
impl SqlPool for sqlx::MySqlPool {}
