//! What this backend is called, and the URL schemes it takes: the bottom
//! of the crate, which every other module may name.

/// The backend's name, as [`Capabilities::backend`](lock_core::Capabilities::backend) and
/// error messages give it.
pub const NAME: &str = "redis";

/// The URL schemes this backend accepts (`rediss` is TLS; `redis+cluster`
/// and `rediss+cluster` name a Redis Cluster by some of its nodes;
/// `redis+sentinel` and `rediss+sentinel` name a master by its sentinels).
pub const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
];
