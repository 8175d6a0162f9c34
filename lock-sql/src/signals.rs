//! In-process wake-ups, kept apart per family: a release of the mutex
//! `jobs` must not spend its one wake-up on a waiter for the semaphore
//! `jobs`, which would then sleep until its next poll. Observers of an
//! election are woken apart from its candidates, by every change of its
//! leader, not only by the releases that let a candidate in.

use lock_core::LockName;
use lock_core::backend::Family;
use lock_core::backend::{BackendStats, ReleaseSignals};

/// The tag of a PostgreSQL notice that an election's leader or value
/// changed and nothing was freed.
#[cfg(feature = "postgres")]
pub(crate) const LEADER_NOTICE: &str = "leader";

/// One [`ReleaseSignals`] per family, and one for observers of elections.
#[derive(Debug, Default)]
pub(crate) struct Signals {
    mutex: ReleaseSignals,
    semaphore: ReleaseSignals,
    read_write: ReleaseSignals,
    election: ReleaseSignals,
    /// Observers of elections (`leader_changed`), every one woken by each
    /// change.
    leaders: ReleaseSignals,
}

impl Signals {
    /// The registry the waiters of `family` subscribe to.
    pub(crate) fn of(&self, family: Family) -> &ReleaseSignals {
        match family {
            Family::Semaphore => &self.semaphore,
            Family::ReadWrite => &self.read_write,
            Family::Election => &self.election,
            _ => &self.mutex,
        }
    }

    /// Wakes the local waiters a release of `family`'s `name` may let in:
    /// one for the mutex and a semaphore (one permit came free), every one
    /// for a read-write lock (a writer's release lets every reader in; a
    /// reader's may let a writer in, and the waiters' next attempt says which).
    /// An election's also changes who leads, for its observers.
    pub(crate) fn wake(&self, family: Family, name: &LockName) {
        match family {
            Family::ReadWrite => self.read_write.notify_all(name),
            Family::Election => {
                self.election.notify(name);
                self.leader_changed(name);
            }
            other => self.of(other).notify(name),
        }
    }

    /// What observers of elections wait on.
    pub(crate) fn leaders(&self) -> &ReleaseSignals {
        &self.leaders
    }

    /// Wakes every local observer of the election `name`: a grant or a
    /// proclaim, which lets no candidate in.
    pub(crate) fn leader_changed(&self, name: &LockName) {
        self.leaders.notify_all(name);
    }

    /// Wakes waiters for a server's notice (PostgreSQL's `NOTIFY`): of a
    /// release, whose payload is the bare name for the mutex and, for
    /// another family, its tag, a space and the name (names hold no spaces,
    /// so the two cannot be confused); or of an election's grant or
    /// proclaim, [`LEADER_NOTICE`], a space and the name. Other tags (a
    /// newer lock-sql's, sharing the channel) wake nobody.
    #[cfg(feature = "postgres")]
    pub(crate) fn wake_for_notice(&self, payload: &str) {
        let (tag, name) = payload.split_once(' ').unwrap_or(("", payload));
        let Ok(name) = LockName::new(name) else {
            return;
        };
        if tag == LEADER_NOTICE {
            return self.leader_changed(&name);
        }
        let families = [
            Family::Mutex,
            Family::Semaphore,
            Family::ReadWrite,
            Family::Election,
        ];
        if let Some(family) = families.into_iter().find(|f| f.tag() == tag) {
            self.wake(family, &name);
        }
    }

    /// Wake-ups sent to local waiters of every family (not to observers).
    pub(crate) fn stats(&self) -> BackendStats {
        let all = [
            &self.mutex,
            &self.semaphore,
            &self.read_write,
            &self.election,
        ];
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

    #[tokio::test]
    async fn election_notices_wake_observers_and_candidates_apart() {
        let signals = Signals::default();
        let name = LockName::new("jobs").unwrap();
        let candidate = signals.of(Family::Election).subscribe(&name);
        let observer = signals.leaders().subscribe(&name);
        let now = std::time::Duration::ZERO;
        // A grant or a proclaim: observers only.
        let (seen, let_in) = (observer.notified(), candidate.notified());
        tokio::pin!(seen, let_in);
        seen.as_mut().enable();
        let_in.as_mut().enable();
        signals.wake_for_notice("leader jobs");
        assert!(tokio::time::timeout(now, seen).await.is_ok());
        assert!(tokio::time::timeout(now, let_in.as_mut()).await.is_err());
        // A release: one candidate, and the observers.
        let seen = observer.notified();
        tokio::pin!(seen);
        seen.as_mut().enable();
        signals.wake_for_notice("elect jobs");
        assert!(tokio::time::timeout(now, seen).await.is_ok());
        assert!(tokio::time::timeout(now, let_in).await.is_ok());
        assert_eq!(signals.stats().wakeups, 1, "observers are not waiters");
    }
}
