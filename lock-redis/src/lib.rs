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
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
mod keys;
#[cfg(feature = "raw")]
pub mod node;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod node;
mod notices;
mod scripts;
mod tls;

pub use backend::RedisBackend;

pub use config::{NAME, SCHEMES};
