#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod config;
pub mod eviction;
pub mod node;
mod notices;
mod scripts;

pub use backend::RedisBackend;
