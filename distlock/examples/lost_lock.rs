//! Working under a lock that can be lost: stop as soon as the guard says
//! so, and tell the caller the work may overlap another holder's.
//!
//! ```text
//! cargo run -p distlock --example lost_lock
//! ```
//!
//! A lock is lost when its lease runs out before a renewal gets through (a
//! network partition, a paused process, a store that restarted without
//! it) or when the store says another owner has it. Here an operator's
//! "unlock" is simulated by releasing the lease behind the guard's back;
//! the guard's next check with the store finds it gone.

use std::time::Duration;

use distlock::{Error, LockState};

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    let steps = run(&url).await?;
    println!("stopped after {steps} step(s): the lock was lost");
    Ok(())
}

/// Works in steps under a lock until the lock is lost; returns the steps
/// done.
pub(crate) async fn run(url: &str) -> distlock::Result<u32> {
    let locker = distlock::connect(url).await?;
    let guard = locker.lock("compaction").await?;
    let mut steps = 0;
    loop {
        tokio::select! {
            // `lost()` fires when the keep-alive finds the lock gone or the
            // lease runs out; `biased` checks it before each step.
            biased;
            () = guard.lost() => break,
            () = tokio::time::sleep(Duration::from_millis(10)) => {
                steps += 1; // one step of the work
            }
        }
        if steps == 3 {
            // The operator's unlock.
            locker.backend().release(&guard.lease()).await?;
        }
        // Checking with the store costs a round trip; do it where acting
        // on a lost lock would do harm (before a write that has no fencing
        // token to stop it).
        if steps >= 3 && !guard.is_held().await? {
            assert_eq!(guard.state(), LockState::Lost);
        }
    }
    match guard.release().await {
        Err(Error::Lost { .. }) => Ok(steps),
        other => panic!("a lost lock's release says so: {other:?}"),
    }
}
