#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod election;
mod grant;
mod majority;

pub use backend::RedlockBackend;

pub use config::{NAME, RedlockConfig, SCHEMES};

/// The `redis` crate whose clients [`RedlockBackend::from_clients`] takes, at the version it was built with.
pub use redis;
