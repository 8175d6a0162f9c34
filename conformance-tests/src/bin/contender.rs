//! One process of the multi-process conformance case: takes the lock
//! `ROUNDS` times and logs each critical section's start and end.
//!
//! Usage: `contender URL NAME ROUNDS LOG [PERMITS]`; with `PERMITS`, each
//! section holds one permit of a semaphore of that many instead of the lock.

use conformance_tests::kinds::Kinds;
use std::io::Write;
use std::time::Duration;

use lock_core::{AcquireOptions, LockKind, Wait};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, name, rounds, log, kind) = match args.as_slice() {
        [url, name, rounds, log] => (url, name, rounds, log, LockKind::Exclusive),
        [url, name, rounds, log, permits] => {
            (url, name, rounds, log, LockKind::permit(permits.parse()?))
        }
        _ => return Err("usage: contender URL NAME ROUNDS LOG [PERMITS]".into()),
    };
    let rounds: usize = rounds.parse()?;
    let locker = distlock::connect(url).await?;
    let opts =
        AcquireOptions::with_ttl(Duration::from_secs(10)).wait(Wait::For(Duration::from_secs(90)));
    let pid = std::process::id();
    for _ in 0..rounds {
        let guard = locker.lock_kind(name, kind, opts).await?;
        append(log, &format!("enter {pid} {}\n", guard.token()))?;
        tokio::time::sleep(Duration::from_millis(3)).await;
        append(log, &format!("exit {pid} {}\n", guard.token()))?;
        guard.release().await?;
    }
    Ok(())
}

/// One `write` with `O_APPEND`: lines from different processes never tear.
fn append(path: &str, line: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}
