//! Peers: other crates' locks and elections, measured in the same run as
//! the library and the floor. A peer is a [`Contender`] that waits its own
//! way; a backend adds one with one impl in a module here and one entry in
//! [`for_backend`] (a lock) or [`candidates_for_backend`] (an election).

#[cfg(feature = "etcd")]
mod etcd_election;
#[cfg(feature = "etcd")]
mod etcd_lock;
#[cfg(feature = "etcd")]
mod etcd_wait;
#[cfg(feature = "redlock")]
mod rslock;
mod tokio_mutex;
#[cfg(feature = "zk")]
mod zk_lock;

use std::sync::Arc;
use std::time::Duration;

use distlock::Result;

use super::contender::Contender;

/// The peers worth comparing with the backend `url`'s scheme picks, on the
/// same store.
pub(crate) async fn for_backend(url: &str, ttl: Duration) -> Result<Vec<Arc<dyn Contender>>> {
    // Not every build has a peer that needs them.
    let _ = (url, ttl);
    Ok(match crate::cli::bench::url::scheme(url) {
        "memory" => vec![Arc::new(tokio_mutex::TokioMutex::default())],
        #[cfg(feature = "etcd")]
        s if distlock::backends::etcd::SCHEMES.contains(&s) => {
            vec![Arc::new(etcd_lock::EtcdLock::open(url, ttl).await?)]
        }
        #[cfg(feature = "zk")]
        s if distlock::backends::zk::SCHEMES.contains(&s) => {
            vec![Arc::new(zk_lock::ZkLock::open(url).await?)]
        }
        #[cfg(feature = "redlock")]
        s if distlock::backends::redlock::SCHEMES.contains(&s) => {
            vec![Arc::new(rslock::Rslock::open(url, ttl)?)]
        }
        _ => Vec::new(),
    })
}

/// The elections of other crates worth comparing with the backend `url`'s
/// scheme picks, on the same store: the election workload's peers.
pub(crate) async fn candidates_for_backend(
    url: &str,
    ttl: Duration,
) -> Result<Vec<Arc<dyn Contender>>> {
    #[cfg(feature = "etcd")]
    if distlock::backends::etcd::SCHEMES.contains(&crate::cli::bench::url::scheme(url)) {
        return Ok(vec![Arc::new(
            etcd_election::EtcdElection::open(url, ttl).await?,
        )]);
    }
    // Not every build has a peer that needs them.
    let _ = (url, ttl);
    Ok(Vec::new())
}
