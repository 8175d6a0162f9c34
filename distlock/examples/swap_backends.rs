//! The same code on any backend: the URL picks it.
//!
//! ```text
//! cargo run -p distlock --example swap_backends                      # SQLite in a temporary directory
//! DISTLOCK_URL=postgres://user:pass@db/app cargo run -p distlock --features postgres --example swap_backends
//! DISTLOCK_URL=etcd://10.0.0.5:2379 cargo run -p distlock --features etcd --example swap_backends
//! ```
//!
//! On a laptop, SQLite needs no server; in production the same binary takes
//! the URL of the shared store from its environment.

use std::time::Duration;

use distlock::{AcquireOptions, Wait};

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = std::env::var("DISTLOCK_URL")
        .unwrap_or_else(|_| format!("sqlite://{}/locks.db", dir.path().display()));
    let report = run(&url).await?;
    println!("{report}");
    Ok(())
}

/// Takes a lock on the backend at `url`, works under it and says what it
/// did.
pub(crate) async fn run(url: &str) -> distlock::Result<String> {
    let opts =
        AcquireOptions::with_ttl(Duration::from_secs(15)).wait(Wait::For(Duration::from_secs(5)));
    let locker = distlock::connect(url).await?.with_defaults(opts);
    let backend = locker.capabilities().backend;
    locker
        .with_lock("report-2026-11", |held| async move {
            // The work goes here. `held` carries the fencing token to pass to
            // whatever the lock protects.
            format!(
                "{backend}: built the report under lock {} with fencing token {}",
                held.name(),
                held.token()
            )
        })
        .await
}
