//! The lock services the suite runs against.

use std::sync::Arc;

use lock_core::{LockBackend, MemoryBackend, async_trait};

use crate::Target;

/// The in-process backend: every client is a clone of one [`MemoryBackend`].
#[derive(Debug, Default)]
pub struct MemoryTarget {
    backend: MemoryBackend,
}

impl MemoryTarget {
    /// A fresh, empty set of locks.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Target for MemoryTarget {
    fn label(&self) -> &str {
        "memory"
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        Arc::new(self.backend.clone())
    }

    fn url(&self) -> Option<String> {
        None
    }
}

/// A fresh SQLite file in a temporary directory; each client opens its own
/// connection pool on it, as separate processes would.
#[cfg(feature = "sqlite")]
#[derive(Debug)]
pub struct SqliteTarget {
    _dir: tempfile::TempDir,
    url: String,
}

#[cfg(feature = "sqlite")]
impl SqliteTarget {
    /// A new database file.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let url = format!("sqlite://{}/locks.db", dir.path().display());
        Self { _dir: dir, url }
    }
}

#[cfg(feature = "sqlite")]
impl Default for SqliteTarget {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "sqlite")]
#[async_trait]
impl Target for SqliteTarget {
    fn label(&self) -> &str {
        "sqlite"
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        distlock::connect_backend(&self.url)
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", self.url))
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}
