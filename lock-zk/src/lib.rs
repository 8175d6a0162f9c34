#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod config;

pub use backend::{MIN_TTL, ROOT, ZkBackend};
