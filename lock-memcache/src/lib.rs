#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use backend::{MIN_TTL, MemcacheBackend};

mod backend;
pub mod config;
/// The meta-protocol client (feature `raw`: for tests and benchmarks, no
/// stability promise).
#[cfg(feature = "raw")]
pub mod meta;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod meta;
mod semaphore;
mod stream;

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "memcache";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["memcache"];
