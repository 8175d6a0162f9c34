#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
pub mod config;
mod majority;

pub use backend::RedlockBackend;

pub use config::{NAME, SCHEMES};
