#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
mod cleanup;
pub mod config;
mod error;
mod expiry;
mod handover;
mod layout;
mod recipe;
mod semaphore;
mod session;

pub use backend::MIN_TTL;
pub use backend::ZkBackend;
pub use layout::ROOT;

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "zookeeper";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["zk"];
