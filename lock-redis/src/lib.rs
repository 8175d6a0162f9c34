#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod config;
mod confirm;
#[cfg(feature = "raw")]
pub mod conn;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod conn;
mod error;
#[cfg(feature = "raw")]
pub mod eviction;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod eviction;
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
mod group;
#[cfg(feature = "raw")]
pub mod node;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod node;
mod notices;
mod scripts;
mod tls;

pub use backend::RedisBackend;

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "redis";

/// The URL schemes this backend accepts (`rediss` is TLS; `redis+cluster`
/// and `rediss+cluster` name a Redis Cluster by some of its nodes;
/// `redis+sentinel` and `rediss+sentinel` name a master by its sentinels).
pub const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
];
