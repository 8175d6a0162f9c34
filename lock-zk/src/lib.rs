#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod cleanup;
mod config;
mod confirm;
mod election;
mod error;
mod expiry;
mod handover;
mod held;
mod holders;
mod layout;
mod names;
mod node;
mod recipe;
mod semaphore;
mod session;
mod waiters;

pub use backend::MIN_TTL;
pub use backend::ZkBackend;
pub use layout::ROOT;

pub use config::ZkConfig;
pub use names::{NAME, SCHEMES};
