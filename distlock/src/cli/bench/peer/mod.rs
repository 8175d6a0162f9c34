//! Peers: other crates' locks, measured in the same run as the library and
//! the floor. A peer is a [`Contender`] that waits its own way; a backend
//! adds one with one impl in a module here and one entry in [`for_backend`].

mod tokio_mutex;

use std::sync::Arc;

use super::contender::Contender;

/// The peers worth comparing with `backend` (as its capabilities name it).
pub(crate) fn for_backend(backend: &str) -> Vec<Arc<dyn Contender>> {
    match backend {
        "memory" => vec![Arc::new(tokio_mutex::TokioMutex::default())],
        _ => Vec::new(),
    }
}
