//! The floor: each backend's own acquire and release, with no library logic,
//! measured in the same run as the library so every result can be given as
//! a ratio to it.
//!
//! A backend adds its floor with one [`Floor`] impl in a module here and one
//! arm in [`connect`].

mod memory;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use distlock::{Error, OwnerToken, Result, async_trait};

use super::contender::{Contender, Spinning};

/// A backend's raw lock primitive: one attempt, and the release that goes
/// with it, each as few round trips as the backend allows, with the same
/// durability and connection settings the library uses.
#[async_trait]
pub(crate) trait Floor: Send + Sync + 'static {
    /// What the release needs to know about a grant.
    type Grant: Send + Sync + 'static;

    /// The primitive in words, for the report.
    fn describe(&self) -> String;

    /// One attempt: `Ok(None)` when somebody else holds `name`. Errors that a
    /// retry may get past are [retryable](Error::is_retryable).
    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<Self::Grant>>;

    /// Releases a grant if it is still the owner's.
    async fn release(&self, grant: &Self::Grant) -> Result<()>;
}

/// The floor of `backend` (as its capabilities name it), opened on the same
/// store as `url`.
#[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
pub(crate) async fn connect(
    backend: &'static str,
    url: &str,
    ttl: Duration,
) -> Result<Arc<dyn Contender>> {
    match backend {
        "memory" => Ok(Arc::new(Spinning::new(memory::MemoryFloor::default(), ttl))),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Arc::new(Spinning::new(
            sqlite::SqliteFloor::open(url).await?,
            ttl,
        ))),
        _ => Err(Error::Unsupported {
            backend,
            operation: "benchmarking, as it has no floor yet (docs/BENCHMARKS.md says how to add one)",
        }),
    }
}
