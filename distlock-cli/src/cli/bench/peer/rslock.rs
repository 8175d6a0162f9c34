//! The `rslock` crate's Redlock (`LockManager::lock` retried as its
//! `acquire_no_guard` retries it, then `Lock::release`) on the same masters.

use std::time::{Duration, Instant};

use distlock::Result;
use distlock::backend::OwnerToken;
use distlock::backend::async_trait;
use distlock::backends::redlock::RedlockConfig;
use rslock::{Lock, LockManager};

use crate::cli::bench::contender::{Contender, Held, Role, Subject};

/// rslock's default pause bound between tries.
const RETRY_DELAY: Duration = Duration::from_millis(200);

/// A random duration below `bound`, as rslock draws its pauses.
fn jitter(bound: Duration) -> Duration {
    let random = u64::from_str_radix(&OwnerToken::random().to_hex()[..12], 16).unwrap_or(0);
    let bound = u64::try_from(bound.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(random % bound)
}

pub(super) struct Rslock {
    manager: LockManager,
    masters: usize,
    ttl: Duration,
}

impl Rslock {
    pub(super) fn open(url: &str, ttl: Duration) -> Result<Self> {
        let base = url.split_once('?').map_or(url, |(b, _)| b);
        let config = RedlockConfig::from_url(base)?;
        let clients = config
            .masters
            .iter()
            .map(|m| m.client(&config.tls))
            .collect::<Result<Vec<_>>>()?;
        let mut manager = LockManager::from_clients(clients);
        manager.set_retry(1, RETRY_DELAY);
        Ok(Self {
            manager,
            masters: config.masters.len(),
            ttl,
        })
    }
}

#[async_trait]
impl Contender for Rslock {
    fn subject(&self) -> Subject {
        Subject {
            role: Role::Peer,
            name: "rslock".to_owned(),
            detail: format!(
                "rslock 0.10 LockManager on the same {} masters: lock (SET NX PX on each, \
                 quorum and validity check, else delete), retried after a random pause below \
                 200 ms as acquire_no_guard does, then unlock",
                self.masters
            ),
        }
    }

    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        let key = format!("distlock-bench-peer:{name}");
        // `acquire_no_guard` is `lock` in a loop, and each `lock` is up to
        // 3 tries with a random pause below 200 ms between them, each failed
        // try deleting what it set. Cancelling it mid-try could leave a key
        // set until its TTL, so the same loop runs here one try at a time
        // (the manager is set to 1 try), with the same pauses, cut short at
        // the deadline.
        loop {
            if let Ok(lock) = self.manager.lock(key.as_bytes(), self.ttl).await {
                return Ok(Some(Box::new(RslockHeld(lock))));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            tokio::time::sleep(jitter(RETRY_DELAY).min(left)).await;
        }
    }
}

struct RslockHeld(Lock);

#[async_trait]
impl Held for RslockHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        self.0.release().await;
        Ok(())
    }
}
