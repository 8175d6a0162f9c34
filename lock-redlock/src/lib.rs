#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod config;
mod majority;

pub use backend::RedlockBackend;

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "redlock";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["redlock"];
