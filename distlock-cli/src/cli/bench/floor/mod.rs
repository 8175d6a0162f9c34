//! The floor: each backend's own acquire and release, with no library logic,
//! measured in the same run as the library so every result can be given as
//! a ratio to it.
//!
//! A backend adds its floor with one `Floor` impl (`primitive.rs`) in a
//! module here and one arm in [`connect`]; `spinning.rs` drives every floor
//! the same way.

#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(feature = "memcache")]
mod memcache;
mod memory;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod primitive;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "redis", feature = "redlock"))]
mod redis_ops;
#[cfg(feature = "redlock")]
mod redlock;
mod spinning;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "zk")]
pub(crate) mod zk;

use std::sync::Arc;
use std::time::Duration;

use distlock::{Error, Result};

use super::contender::Contender;
use primitive::Floor;
use spinning::Spinning;

/// The floor of the backend `url`'s scheme picks (`backend` is its name, for
/// the error when it has none), opened on the same store as `url`.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "redlock",
        feature = "etcd",
        feature = "zk",
        feature = "memcache"
    )),
    allow(unused_variables)
)]
pub(crate) async fn connect(
    backend: &'static str,
    url: &str,
    ttl: Duration,
) -> Result<Arc<dyn Contender>> {
    match crate::cli::bench::url::scheme(url) {
        "memory" => Ok(spin(memory::MemoryFloor::default(), ttl)),
        #[cfg(feature = "sqlite")]
        s if distlock::backends::sql::SQLITE_SCHEMES.contains(&s) => {
            Ok(spin(sqlite::SqliteFloor::open(url).await?, ttl))
        }
        #[cfg(feature = "postgres")]
        s if distlock::backends::sql::POSTGRES_SCHEMES.contains(&s) => {
            Ok(spin(postgres::PostgresFloor::open(url).await?, ttl))
        }
        #[cfg(feature = "mysql")]
        s if distlock::backends::sql::MYSQL_SCHEMES.contains(&s) => {
            Ok(spin(mysql::MySqlFloor::open(url).await?, ttl))
        }
        #[cfg(feature = "redis")]
        s if distlock::backends::redis::SCHEMES.contains(&s) => {
            Ok(spin(redis::RedisFloor::open(url).await?, ttl))
        }
        #[cfg(feature = "redlock")]
        s if distlock::backends::redlock::SCHEMES.contains(&s) => {
            Ok(spin(redlock::RedlockFloor::open(url).await?, ttl))
        }
        #[cfg(feature = "etcd")]
        s if distlock::backends::etcd::SCHEMES.contains(&s) => {
            Ok(spin(etcd::EtcdFloor::open(url).await?, ttl))
        }
        #[cfg(feature = "zk")]
        s if distlock::backends::zk::SCHEMES.contains(&s) => {
            Ok(spin(zk::ZkFloor::open(url).await?, ttl))
        }
        #[cfg(feature = "memcache")]
        s if distlock::backends::memcache::SCHEMES.contains(&s) => {
            Ok(spin(memcache::MemcacheFloor::open(url)?, ttl))
        }
        _ => Err(Error::unsupported(
            backend,
            "benchmarking, as it has no floor yet (docs/BENCHMARKS.md says how to add one)",
        )),
    }
}

/// A floor run by the shared spinning client.
fn spin<F: Floor>(floor: F, ttl: Duration) -> Arc<dyn Contender> {
    Arc::new(Spinning::new(floor, ttl))
}
