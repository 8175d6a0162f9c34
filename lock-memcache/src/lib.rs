#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use backend::{MIN_TTL, MemcacheBackend};

mod backend;
mod ballot;
mod config;
mod election;
/// The meta-protocol client (feature `raw`: for tests and benchmarks, no
/// stability promise).
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub mod meta;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod meta;
mod owner_writes;
mod place;
mod semaphore;
mod stream;

pub use config::{MemcacheConfig, NAME, SCHEMES};
