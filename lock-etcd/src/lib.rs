#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod backend;
mod catch_up;
pub mod client;
mod config;
mod election;
mod error;
mod handover;
mod holders;
mod layout;
mod mark;
mod names;
mod probe;
mod queue;
mod queued;
mod semaphore;
mod semaphore_wait;
mod session;
mod shared_watch;

pub use backend::{EtcdBackend, MIN_TTL};

pub use config::EtcdConfig;
pub use names::{NAME, SCHEMES};

/// The `etcd-client` crate whose client [`EtcdBackend::from_client`]
/// takes, at the version this crate was built with.
pub use etcd_client;
