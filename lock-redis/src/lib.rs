#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod config;
#[cfg(feature = "raw")]
pub mod eviction;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod eviction;
#[cfg(feature = "raw")]
pub mod node;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod node;
mod notices;
mod scripts;

pub use backend::RedisBackend;
