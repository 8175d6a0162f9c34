#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admitted;
pub mod backend;
pub mod blocking;
mod capabilities;
mod election;
mod error;
mod guard;
mod handle;
mod handover;
mod held;
mod holding;
mod kind;
mod leader;
mod lease;
mod lock_backend;
mod locker;
mod memory;
mod metrics;
mod multi;
mod name;
mod options;
mod per_name;
mod record;
mod redact;
mod renewal;
mod renewal_queue;
mod rwlock;
pub mod secret;
mod section;
mod semaphore;
mod setters;
mod single_flight;
mod state;
mod stats;
pub mod tls;
mod token;
mod turns;
pub mod url;
mod wait;

pub use capabilities::{Capabilities, Fencing};
pub use election::{Election, LeaderGuard, LeaderWatch};
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use handle::{LockHandle, StateWatch};
pub use kind::LockKind;
pub use leader::Leader;
pub use lease::Lease;
pub use lock_backend::Holder;
pub use locker::Locker;
pub use memory::MemoryBackend;
pub use multi::{MultiGuard, MultiLock};
pub use name::LockName;
pub use options::{AcquireOptions, Wait};
pub use rwlock::RwLock;
pub use semaphore::Semaphore;
pub use state::LockState;
pub use token::FencingToken;
