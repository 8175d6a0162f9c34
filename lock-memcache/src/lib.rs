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
