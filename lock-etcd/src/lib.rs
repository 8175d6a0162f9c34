#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod client;
pub mod config;
mod error;
mod handover;
mod layout;
mod probe;
mod queue;
mod semaphore;
mod session;

pub use backend::{EtcdBackend, MIN_TTL};

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "etcd";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["etcd"];
