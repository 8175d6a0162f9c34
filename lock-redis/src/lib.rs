#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod confirm;
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub mod conn;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod conn;
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub mod election;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod election;
mod error;
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub mod eviction;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod eviction;
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
mod group;
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
mod keys;
#[cfg(feature = "raw")]
#[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
pub mod node;
#[cfg(not(feature = "raw"))]
#[allow(unreachable_pub)]
mod node;
mod notices;
mod scripts;
mod tls;

pub use backend::RedisBackend;

pub use config::{NAME, RedisConfig, SCHEMES, Server, Topology};

/// The `redis` crate this backend's [`RedisBackend::from_client`] takes a client of, at the version it was built with.
pub use redis;
