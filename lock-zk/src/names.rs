//! What this backend is called, and the URL schemes it takes: the bottom
//! of the crate, which every other module may name.

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "zookeeper";

/// The URL schemes this backend accepts.
pub const SCHEMES: &[&str] = &["zk"];
