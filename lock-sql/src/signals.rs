//! In-process wake-ups, kept apart per family: a release of the mutex
//! `jobs` must not spend its one wake-up on a waiter for the semaphore
//! `jobs`, which would then sleep until its next poll.

use lock_core::LockName;
use lock_core::backend::Family;
use lock_core::backend::{BackendStats, ReleaseSignals};

/// One [`ReleaseSignals`] per family.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    mutex: ReleaseSignals,
    semaphore: ReleaseSignals,
    read_write: ReleaseSignals,
}

impl Signals {
    /// The registry the waiters of `family` subscribe to.
    pub(crate) fn of(&self, family: Family) -> &ReleaseSignals {
        match family {
            Family::Semaphore => &self.semaphore,
            Family::ReadWrite => &self.read_write,
            _ => &self.mutex,
        }
    }

    /// Wakes the local waiters a release of `family`'s `name` may let in:
    /// one for the mutex and a semaphore (one permit came free), every one
    /// for a read-write lock (a writer's release lets every reader in; a
    /// reader's may let a writer in, and the waiters' next attempt says which).
    pub(crate) fn wake(&self, family: Family, name: &LockName) {
        match family {
            Family::ReadWrite => self.read_write.notify_all(name),
            other => self.of(other).notify(name),
        }
    }

    /// Wakes waiters for a server's release notice (PostgreSQL's `NOTIFY`):
    /// the mutex's payload is the bare name, another family's is its tag, a
    /// space and the name (names hold no spaces, so the two cannot be
    /// confused).
    #[cfg(feature = "postgres")]
    pub(crate) fn wake_for_notice(&self, payload: &str) {
        let (family, name) = match payload.split_once(' ') {
            None => (Family::Mutex, payload),
            Some((tag, name)) => {
                let families = [Family::Semaphore, Family::ReadWrite];
                match families.into_iter().find(|f| f.tag() == tag) {
                    Some(family) => (family, name),
                    None => return,
                }
            }
        };
        if let Ok(name) = LockName::new(name) {
            self.wake(family, &name);
        }
    }

    /// Wake-ups sent to local waiters of every family.
    pub(crate) fn stats(&self) -> BackendStats {
        let all = [&self.mutex, &self.semaphore, &self.read_write];
        BackendStats::default().with_wakeups(all.iter().map(|s| s.wakeups()).sum())
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notices_wake_only_their_own_family() {
        let signals = Signals::default();
        let name = LockName::new("jobs").unwrap();
        let sem = signals.of(Family::Semaphore).subscribe(&name);
        let mutex = signals.of(Family::Mutex).subscribe(&name);
        let (sem_woken, mutex_woken) = (sem.notified(), mutex.notified());
        tokio::pin!(sem_woken, mutex_woken);
        sem_woken.as_mut().enable();
        mutex_woken.as_mut().enable();
        signals.wake_for_notice("sem jobs");
        let now = std::time::Duration::ZERO;
        assert!(tokio::time::timeout(now, sem_woken).await.is_ok());
        assert!(
            tokio::time::timeout(now, mutex_woken.as_mut())
                .await
                .is_err()
        );
        signals.wake_for_notice("jobs");
        assert!(tokio::time::timeout(now, mutex_woken).await.is_ok());
        signals.wake_for_notice("nonsense jobs");
        assert_eq!(signals.stats().wakeups, 2);
    }
}
