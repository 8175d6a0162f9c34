#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod cleanup;
pub mod config;
mod error;
mod expiry;
mod handover;
mod holders;
mod layout;
mod recipe;
mod semaphore;
mod session;

pub use backend::MIN_TTL;
pub use backend::ZkBackend;
pub use layout::ROOT;

pub use config::{NAME, SCHEMES};
