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

pub use config::{NAME, SCHEMES};
