//! The library on a backend that waits on the server (Postgres `LISTEN`,
//! Redis pub/sub, etcd and ZooKeeper watches): such a backend cannot be
//! wrapped in [`Counting`](super::counting::Counting), so the bench connects
//! it as its concrete type and reads the wake-ups it counts itself.

use distlock::{Locker, Result};

use super::contender::Library;

/// The library on `backend` with its own wake-up counter, where it has one;
/// `None` for the others.
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "redis",
        feature = "etcd",
        feature = "zk"
    )),
    allow(unused_variables)
)]
pub(crate) async fn library(backend: &str, url: &str, locker: &Locker) -> Result<Option<Library>> {
    let defaults = locker.defaults();
    let url = super::floor::without_common_options(url);
    Ok(match backend {
        #[cfg(feature = "postgres")]
        "postgres" => {
            let b = std::sync::Arc::new(distlock::lock_sql::SqlBackend::connect(&url).await?);
            Some(Library::with_notices(
                Locker::from_arc(b.clone()).with_defaults(defaults),
                Box::new(move || b.wakeups()),
            ))
        }
        #[cfg(feature = "redis")]
        "redis" => {
            let b = std::sync::Arc::new(distlock::lock_redis::RedisBackend::connect(&url).await?);
            Some(Library::with_notices(
                Locker::from_arc(b.clone()).with_defaults(defaults),
                Box::new(move || b.wakeups()),
            ))
        }
        #[cfg(feature = "etcd")]
        "etcd" => {
            let b = std::sync::Arc::new(distlock::lock_etcd::EtcdBackend::connect(&url).await?);
            Some(Library::with_notices(
                Locker::from_arc(b.clone()).with_defaults(defaults),
                Box::new(move || b.wakeups()),
            ))
        }
        #[cfg(feature = "zk")]
        "zookeeper" => {
            let b = std::sync::Arc::new(distlock::lock_zk::ZkBackend::connect(&url).await?);
            Some(Library::with_notices(
                Locker::from_arc(b.clone()).with_defaults(defaults),
                Box::new(move || b.wakeups()),
            ))
        }
        _ => None,
    })
}
