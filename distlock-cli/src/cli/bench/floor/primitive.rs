//! What a floor is: a backend's raw lock primitive, and the helpers its
//! implementations share.

use std::time::Duration;

use distlock::Result;
use distlock::backend::OwnerToken;
use distlock::backend::async_trait;

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
    /// retry may get past are [retryable](distlock::Error::is_retryable).
    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<Self::Grant>>;

    /// Releases a grant if it is still the owner's.
    async fn release(&self, grant: &Self::Grant) -> Result<()>;

    /// Whether a grant nobody releases is freed by its TTL while this
    /// process lives: the failover of the election workload waits for that.
    fn leases_expire(&self) -> bool {
        true
    }
}

/// `url` without its query string: what the floors hand their drivers.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn base_url(url: &str) -> &str {
    url.split_once('?').map_or(url, |(base, _)| base)
}

/// A floor's failure as the library would report it: retryable when the
/// backend's own error is transient, so the bench retries it alike.
#[cfg(any(
    feature = "sqlite",
    feature = "postgres",
    feature = "mysql",
    feature = "redis",
    feature = "redlock",
    feature = "etcd",
    feature = "zk"
))]
pub(super) fn floor_error<E>(
    backend: &'static str,
    operation: &str,
    transient: bool,
    e: E,
) -> distlock::Error
where
    E: std::fmt::Display + Into<distlock::backend::BoxError>,
{
    let message = format!("floor {operation}: {e}");
    let error = if transient {
        distlock::Error::unavailable(backend, message)
    } else {
        distlock::Error::backend(message)
    };
    error.with_source(e)
}
