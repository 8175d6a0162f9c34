#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod meta;

pub use backend::{MIN_TTL, MemcacheBackend};
