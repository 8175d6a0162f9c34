#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod config;
#[cfg(feature = "raw")]
pub mod meta;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod meta;

pub use backend::{MIN_TTL, MemcacheBackend};

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "memcache";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["memcache"];
