//! Hand-over between a holder and a waiter of the same backend, for
//! backends whose waiters each watch the one entry just before their own
//! (etcd keys, ZooKeeper nodes).
//!
//! A waiter registers the entry it watches before it waits. A release that
//! deletes that entry takes the registration, checks in the same round trip
//! that the waiter's own entry is still there, and grants it: the deleted
//! entry was the holder's, the lowest, and the waiter's was the next. The
//! waiter, woken by the deletion, finds its registration taken and waits for
//! that outcome instead of reading the queue again. Whatever the release
//! could not vouch for (a failed delete or read, a release cancelled midway)
//! leaves the waiter to read the queue as usual.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::options::WaitBudget;

/// Waiters of one backend by the entry each watches. `W` is what a release
/// needs to check the waiter's own entry; `G` is what a grant hands it.
#[derive(Debug)]
pub struct Handovers<W, G> {
    waiting: Mutex<HashMap<String, Waiting<W, G>>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Waiting<W, G> {
    id: u64,
    waiter: W,
    grant: oneshot::Sender<G>,
    /// The waiter's wait: once cancelled (its caller went away), the
    /// waiter is handed nothing, so the lock is not granted to an acquire
    /// nobody waits for any more, only to be given back.
    cancel: CancellationToken,
}

/// A waiter taken by the release that deletes the entry it watches.
#[derive(Debug)]
pub struct Handover<W, G> {
    /// What the waiter registered.
    pub waiter: W,
    grant: oneshot::Sender<G>,
}

/// A waiter's registration: withdrawn when dropped, unless a release took
/// it.
#[derive(Debug)]
pub struct Registration<W, G> {
    handovers: Arc<Handovers<W, G>>,
    watched: String,
    id: u64,
    granted: oneshot::Receiver<G>,
}

impl<W, G> Default for Handovers<W, G> {
    fn default() -> Self {
        Self {
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl<W, G> Handovers<W, G> {
    fn waiting(&self) -> MutexGuard<'_, HashMap<String, Waiting<W, G>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `waiter`, whose wait `budget` bounds, as waiting for the
    /// entry `watched` to go. A later registration for the same entry
    /// replaces this one, which then reads the queue as usual.
    pub fn register(
        self: &Arc<Self>,
        watched: &str,
        waiter: W,
        budget: &WaitBudget,
    ) -> Registration<W, G> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (grant, granted) = oneshot::channel();
        let cancel = budget.cancel_token().clone();
        self.waiting().insert(
            watched.to_owned(),
            Waiting {
                id,
                waiter,
                grant,
                cancel,
            },
        );
        Registration {
            handovers: self.clone(),
            watched: watched.to_owned(),
            id,
            granted,
        }
    }

    /// Takes the waiter of `watched`, if there is one: called by a release
    /// of the holder's entry `watched` before it sends the delete.
    pub fn take(&self, watched: &str) -> Option<Handover<W, G>> {
        let Waiting {
            waiter,
            grant,
            cancel,
            ..
        } = self.waiting().remove(watched)?;
        (!cancel.is_cancelled()).then_some(Handover { waiter, grant })
    }
}

impl<W, G> Handover<W, G> {
    /// Grants the lock to the waiter: only once the delete succeeded and the
    /// waiter's own entry was read back behind it. Dropping the hand-over
    /// instead sends the waiter to read the queue.
    pub fn grant(self, grant: G) {
        let _ = self.grant.send(grant);
    }
}

impl<W, G> Registration<W, G> {
    /// Once the watched entry is gone: what the release that deleted it
    /// granted, if a release of this backend took the registration and
    /// granted it; `None` sends the waiter to read the queue.
    pub async fn handed_over(mut self) -> Option<G> {
        if self.withdraw() {
            return None;
        }
        // The release that took it answers once its reply is in, which
        // comes close behind the event that woke the waiter.
        (&mut self.granted).await.ok()
    }

    /// Removes this registration if no release took it (nor a later one
    /// replaced it); `true` if it was still there.
    fn withdraw(&self) -> bool {
        let mut waiting = self.handovers.waiting();
        let ours = waiting.get(&self.watched).is_some_and(|w| w.id == self.id);
        if ours {
            waiting.remove(&self.watched);
        }
        ours
    }
}

impl<W, G> Drop for Registration<W, G> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_taken_registration_waits_for_the_release_and_an_untaken_one_does_not() {
        let handovers: Arc<Handovers<&str, u32>> = Arc::default();
        let forever = WaitBudget::forever();
        let untaken = handovers.register("a", "waiter of a", &forever);
        assert_eq!(untaken.handed_over().await, None);
        assert!(handovers.take("a").is_none(), "withdrawn");

        let taken = handovers.register("b", "waiter of b", &forever);
        let handover = handovers.take("b").expect("registered");
        assert_eq!(handover.waiter, "waiter of b");
        let granting = tokio::spawn(async move { handover.grant(7) });
        assert_eq!(taken.handed_over().await, Some(7));
        granting.await.unwrap();

        let dropped = handovers.register("c", "waiter of c", &forever);
        drop(handovers.take("c"));
        assert_eq!(dropped.handed_over().await, None, "not vouched for");

        let replaced = handovers.register("d", "first", &forever);
        let newer = handovers.register("d", "second", &forever);
        assert_eq!(replaced.handed_over().await, None);
        drop(newer);
        assert!(
            handovers.take("d").is_none(),
            "dropped registrations leave nothing"
        );

        // A waiter whose caller went away is handed nothing.
        let cancel = CancellationToken::new();
        let budget = WaitBudget::new(crate::Wait::Forever, cancel.clone());
        let gone = handovers.register("e", "gone", &budget);
        cancel.cancel();
        assert!(handovers.take("e").is_none(), "a cancelled waiter");
        drop(gone);
    }
}
