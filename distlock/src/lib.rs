#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod blocking;
mod connect;

pub use connect::{SCHEMES, backend_url, connect, connect_backend};
/// What a backend author needs: the [`LockBackend`](backend::LockBackend)
/// trait and its request types, leases, owner tokens, waiting helpers, URL
/// parsers, `async_trait`, and [`acquire_lease`](backend::acquire_lease)
/// for a lease with nothing to renew it.
pub mod backend {
    pub use lock_core::backend::BoxError;
    pub use lock_core::backend::*;
    pub use lock_core::backend::{Family, OwnerToken};
}
/// URL helpers: [`redact`](url::redact) a URL's password for display,
/// [`parse_duration`](url::parse_duration) a `5s`/`250ms` option.
pub use lock_core::url;
pub use lock_core::{
    AcquireOptions, Capabilities, Election, Error, Fencing, FencingToken, Holder, Leader,
    LeaderGuard, LeaderWatch, Lease, LockGuard, LockHandle, LockKind, LockName, LockState, Locker,
    MemoryBackend, MultiGuard, MultiLock, Result, RwLock, Semaphore, StateWatch, Wait,
};

/// The backends compiled in, one module each, by cargo feature: each is its
/// backend crate (its config type, its constructors, and the driver crate
/// its signatures name).
pub mod backends {
    /// The SQL backend: SQLite, PostgreSQL, MySQL/MariaDB.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql")))
    )]
    pub use lock_sql as sql;

    /// The single-Redis backend (and Redis Cluster and Sentinel).
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use lock_redis as redis;

    /// The Redlock backend.
    #[cfg(feature = "redlock")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
    pub use lock_redlock as redlock;

    /// The etcd backend.
    #[cfg(feature = "etcd")]
    #[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
    pub use lock_etcd as etcd;

    /// The ZooKeeper backend.
    #[cfg(feature = "zk")]
    #[cfg_attr(docsrs, doc(cfg(feature = "zk")))]
    pub use lock_zk as zk;

    /// The memcache backend.
    #[cfg(feature = "memcache")]
    #[cfg_attr(docsrs, doc(cfg(feature = "memcache")))]
    pub use lock_memcache as memcache;
}
