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
//!
//! Several waiters may watch one entry (the readers behind a writer): a
//! release takes the newest of them ([`Handovers::take`]), or, as a
//! [`Releasing`], every one; a waiter not taken reads the queue as usual.
//! While a [`Releasing`] is under way, a waiter of its entry not yet taken
//! cannot withdraw: [`Registration::handed_over`] waits for the release's
//! answer or its end, so a waiter that wants the answer only within
//! bounds of its own races that wait with them, and one that has no use
//! for it drops its registration instead.

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
    entries: Mutex<HashMap<String, Entry<W, G>>>,
    next_id: AtomicU64,
}

/// The waiters of one watched entry, and whether a release of it that
/// answers late waiters is under way ([`Handovers::releasing`]).
#[derive(Debug)]
struct Entry<W, G> {
    /// Oldest registration first.
    waiting: Vec<Waiting<W, G>>,
    releasing: bool,
}

impl<W, G> Default for Entry<W, G> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            releasing: false,
        }
    }
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

/// A release under way that answers every waiter of its entry, those that
/// register while it is in flight included: until it is dropped, a waiter
/// of the entry cannot withdraw, and waits for what
/// [`Releasing::take_all`] (or the drop, which hands nothing) gives it.
#[derive(Debug)]
#[must_use = "the release answers nobody once this is dropped"]
pub struct Releasing<W, G> {
    handovers: Arc<Handovers<W, G>>,
    watched: String,
}

impl<W, G> Default for Handovers<W, G> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl<W, G> Handovers<W, G> {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry<W, G>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `waiter`, whose wait `budget` bounds, as waiting for the
    /// entry `watched` to go, beside any other waiter of that entry.
    pub fn register(
        self: &Arc<Self>,
        watched: &str,
        waiter: W,
        budget: &WaitBudget,
    ) -> Registration<W, G> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (grant, granted) = oneshot::channel();
        let cancel = budget.cancel_token().clone();
        self.entries()
            .entry(watched.to_owned())
            .or_default()
            .waiting
            .push(Waiting {
                id,
                waiter,
                grant,
                cancel,
            });
        Registration {
            handovers: self.clone(),
            watched: watched.to_owned(),
            id,
            granted,
        }
    }

    /// Takes the newest waiter of `watched`, if there is one: called by a
    /// release of the holder's entry `watched` before it sends the delete.
    /// Older waiters of the same entry stay, and read the queue as usual.
    pub fn take(&self, watched: &str) -> Option<Handover<W, G>> {
        let mut entries = self.entries();
        let entry = entries.get_mut(watched)?;
        let newest = entry.waiting.pop();
        if entry.waiting.is_empty() && !entry.releasing {
            entries.remove(watched);
        }
        newest.and_then(Waiting::handover)
    }

    /// Whether a waiter is registered for `watched`.
    pub fn has_waiters(&self, watched: &str) -> bool {
        self.entries()
            .get(watched)
            .is_some_and(|entry| !entry.waiting.is_empty())
    }

    /// A release of `watched` that will answer its waiters, those that
    /// register before the release ends included; `None` while another
    /// such release of it is under way. For a release whose answer vouches
    /// for every waiter that registered before the answer came (a listing
    /// sent behind the delete, which each waiter reads for itself), so that
    /// a waiter registering just as the entry goes is answered too, rather
    /// than reading the queue by itself.
    pub fn releasing(self: &Arc<Self>, watched: &str) -> Option<Releasing<W, G>> {
        let mut entries = self.entries();
        let entry = entries.entry(watched.to_owned()).or_default();
        if entry.releasing {
            return None;
        }
        entry.releasing = true;
        Some(Releasing {
            handovers: self.clone(),
            watched: watched.to_owned(),
        })
    }
}

impl<W, G> Releasing<W, G> {
    /// Takes the entry's waiters registered so far, oldest first; those
    /// that register later wait for the next call, or for the drop.
    pub fn take_all(&self) -> Vec<Handover<W, G>> {
        let mut entries = self.handovers.entries();
        let Some(entry) = entries.get_mut(&self.watched) else {
            return Vec::new();
        };
        let all = std::mem::take(&mut entry.waiting);
        all.into_iter().filter_map(Waiting::handover).collect()
    }
}

impl<W, G> Drop for Releasing<W, G> {
    /// Waiters not taken are handed nothing, and read the queue.
    fn drop(&mut self) {
        self.handovers.entries().remove(&self.watched);
    }
}

impl<W, G> Waiting<W, G> {
    /// The hand-over to this waiter, unless its caller went away.
    fn handover(self) -> Option<Handover<W, G>> {
        let Self {
            waiter,
            grant,
            cancel,
            ..
        } = self;
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

    /// Removes this registration if no release took it, nor a release
    /// under way will answer it ([`Handovers::releasing`]); `true` if it
    /// was removed.
    fn withdraw(&self) -> bool {
        let mut entries = self.handovers.entries();
        let Some(entry) = entries.get_mut(&self.watched) else {
            return false;
        };
        if entry.releasing {
            return false;
        }
        let Some(at) = entry.waiting.iter().position(|w| w.id == self.id) else {
            return false;
        };
        entry.waiting.remove(at);
        if entry.waiting.is_empty() {
            entries.remove(&self.watched);
        }
        true
    }
}

impl<W, G> Drop for Registration<W, G> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Waker};

    use super::*;

    /// Whether `waiting` has no answer yet, polled once.
    fn pending(waiting: Pin<&mut impl Future>) -> bool {
        waiting
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    }

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

        // Two waiters of one entry: `take` hands over to the newer, and
        // the older reads the queue.
        let older = handovers.register("d", "first", &forever);
        let newer = handovers.register("d", "second", &forever);
        let handover = handovers.take("d").expect("registered");
        assert_eq!(handover.waiter, "second");
        handover.grant(8);
        assert_eq!(newer.handed_over().await, Some(8));
        assert_eq!(older.handed_over().await, None);
        assert!(handovers.take("d").is_none(), "withdrawn");
        let dropped = handovers.register("d", "dropped", &forever);
        drop(dropped);
        assert!(
            handovers.take("d").is_none(),
            "dropped registrations leave nothing"
        );

        // A release under way takes every waiter of the entry, oldest first.
        let waiters: Vec<_> = (0..3)
            .map(|_| handovers.register("f", "reader", &forever))
            .collect();
        let releasing = handovers.releasing("f").expect("the first");
        let taken = releasing.take_all();
        assert_eq!(taken.len(), 3);
        for (i, handover) in taken.into_iter().enumerate() {
            handover.grant(10 + u32::try_from(i).unwrap());
        }
        for (i, waiter) in waiters.into_iter().enumerate() {
            assert_eq!(
                waiter.handed_over().await,
                Some(10 + u32::try_from(i).unwrap())
            );
        }
        assert!(releasing.take_all().is_empty());
        drop(releasing);
    }

    #[tokio::test]
    async fn a_release_under_way_answers_the_waiters_that_register_meanwhile() {
        let handovers: Arc<Handovers<&str, u32>> = Arc::default();
        let forever = WaitBudget::forever();
        let early = handovers.register("g", "early", &forever);
        assert!(handovers.has_waiters("g"));
        let releasing = handovers.releasing("g").expect("the first");
        assert!(handovers.releasing("g").is_none(), "one at a time");
        let first = releasing.take_all();
        assert_eq!(first.len(), 1);
        // Registers while the release is in flight, and is woken (its
        // watch fired) before the release has its answer: it waits for it.
        let late = handovers.register("g", "late", &forever);
        let mut late = Box::pin(late.handed_over());
        assert!(pending(late.as_mut()), "waits for the release");
        first.into_iter().for_each(|h| h.grant(1));
        for h in releasing.take_all() {
            assert_eq!(h.waiter, "late");
            h.grant(2);
        }
        assert_eq!(early.handed_over().await, Some(1));
        assert_eq!(late.await, Some(2));

        // One that registers after the last answer is handed nothing when
        // the release ends, and reads the queue.
        let _waiter = handovers.register("h", "waiter", &forever);
        let releasing = handovers.releasing("h").expect("the first");
        drop(releasing.take_all());
        let after = handovers.register("h", "after", &forever);
        let mut after = Box::pin(after.handed_over());
        assert!(pending(after.as_mut()), "waits for the release");
        drop(releasing);
        assert_eq!(after.await, None);
        let again = handovers.register("h", "again", &forever);
        assert_eq!(again.handed_over().await, None, "withdrawn at once");

        // A waiter whose caller went away is handed nothing.
        let cancel = CancellationToken::new();
        let budget = WaitBudget::new(crate::Wait::Forever, cancel.clone());
        let gone = handovers.register("e", "gone", &budget);
        cancel.cancel();
        assert!(handovers.take("e").is_none(), "a cancelled waiter");
        drop(gone);
    }
}
