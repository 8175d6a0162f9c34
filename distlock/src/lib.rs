#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod blocking;
mod connect;

pub use connect::{SCHEMES, backend_url, connect, connect_backend};
/// What a backend author needs: the [`LockBackend`] trait's request types,
/// leases, waiting helpers, URL parsers and `async_trait`.
pub use lock_core::backend;
/// URL helpers: [`redact`](url::redact) a URL's password for display,
/// [`parse_duration`](url::parse_duration) a `5s`/`250ms` option.
pub use lock_core::url;
pub use lock_core::{
    AcquireOptions, BoxError, Capabilities, Error, Family, Fencing, FencingToken, Holder, Lease,
    LockBackend, LockGuard, LockHandle, LockKind, LockName, LockState, Locker, MemoryBackend,
    MultiGuard, MultiLock, OwnerToken, Result, RwLock, Semaphore, StateWatch, Wait,
};

/// The SQL backend: SQLite, PostgreSQL, MySQL/MariaDB.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub use lock_sql;

/// The single-Redis backend.
#[cfg(feature = "redis")]
pub use lock_redis;

/// The Redlock backend.
#[cfg(feature = "redlock")]
pub use lock_redlock;

/// The etcd backend.
#[cfg(feature = "etcd")]
pub use lock_etcd;

/// The ZooKeeper backend.
#[cfg(feature = "zk")]
pub use lock_zk;

/// The memcache backend.
#[cfg(feature = "memcache")]
pub use lock_memcache;
