#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod backend;
mod capabilities;
mod error;
mod guard;
mod handover;
mod held;
mod kind;
mod lease;
mod locker;
mod memory;
mod metrics;
mod name;
mod options;
mod per_name;
mod redact;
mod renewal;
mod renewal_queue;
pub mod secret;
mod single_flight;
mod state;
mod stats;
pub mod tls;
mod token;
mod turns;
pub mod url;
mod wait;

pub use backend::{BackendStats, Holder, LockBackend};
pub use capabilities::{Capabilities, Fencing};
pub use error::{BoxError, Error, Result};
pub use guard::{LockGuard, LockHandle};
pub use kind::{Family, LockKind};
pub use lease::Lease;
pub use locker::Locker;
pub use memory::MemoryBackend;
pub use name::LockName;
pub use options::{AcquireOptions, Wait};
pub use state::LockState;
pub use token::{FencingToken, OwnerToken};
