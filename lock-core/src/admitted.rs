//! Grants that another client's release made on a waiter's behalf.
//!
//! A release of a semaphore's permit or a read-write lock's side can admit
//! the waiters it frees room for in the same server-side step (a script, a
//! statement) and answer with whom it admitted and their tokens. A waiter of
//! the same backend in this process registers its owner token before its
//! first attempt, so that a release answered at any time after that
//! attempt finds it; the release hands each admitted waiter its grant, so
//! the turn between holders costs no round trip of the waiter's own. A waiter in
//! another process learns of it from the release's notice and finds its
//! grant on its next attempt, as the same owner asking again.
//!
//! A grant handed to a waiter that has just given up is not lost: the
//! waiter's own undo (`abandon`) removes everything its owner token has on
//! the server, the admitted grant included.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::token::{FencingToken, OwnerToken};

/// What an admitting release tells its waiter: the token of its grant and,
/// where the release was sent from this process, when, which the grant's
/// lease counts its TTL from (the server admitted it no earlier).
/// Otherwise (the waiter heard of it from a release notice) the lease counts
/// from when the waiter's last refused attempt was sent: the server admitted
/// it after that attempt, which would otherwise have found the grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The fencing token of the grant.
    pub token: FencingToken,
    /// When the admitting release was sent, if from this process.
    pub sent_at: Option<Instant>,
}

/// This backend's waiters that a release may admit, by owner token.
#[derive(Debug, Default)]
pub struct Admissions {
    waiting: Mutex<HashMap<OwnerToken, Waiter>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    tell: oneshot::Sender<Admitted>,
}

impl Admissions {
    fn waiting(&self) -> MutexGuard<'_, HashMap<OwnerToken, Waiter>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the waiter `owner` until the result is dropped.
    pub fn expect(self: &Arc<Self>, owner: OwnerToken) -> Expecting {
        let (tell, told) = oneshot::channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.waiting().insert(owner, Waiter { id, tell });
        Expecting {
            admissions: self.clone(),
            owner,
            id,
            told,
        }
    }

    /// Hands `admitted` to the local waiter `owner`: `false` if it is not
    /// one of this backend's (a waiter of another process) or no longer
    /// waits.
    pub fn admit(&self, owner: OwnerToken, admitted: Admitted) -> bool {
        let Some(waiter) = self.waiting().remove(&owner) else {
            return false;
        };
        waiter.tell.send(admitted).is_ok()
    }
}

/// A waiter's registration; withdrawn when dropped.
#[derive(Debug)]
pub struct Expecting {
    admissions: Arc<Admissions>,
    owner: OwnerToken,
    id: u64,
    told: oneshot::Receiver<Admitted>,
}

impl Expecting {
    /// Waits until a release admits this waiter; never, once the
    /// registration was taken without a grant.
    pub async fn admitted(&mut self) -> Admitted {
        match (&mut self.told).await {
            Ok(admitted) => admitted,
            Err(_) => std::future::pending().await,
        }
    }

    /// The grant, if a release has admitted this waiter already.
    pub fn try_admitted(&mut self) -> Option<Admitted> {
        self.told.try_recv().ok()
    }
}

impl Drop for Expecting {
    fn drop(&mut self) {
        let mut waiting = self.admissions.waiting();
        // Only our own: the same owner may have registered again since.
        if waiting.get(&self.owner).is_some_and(|w| w.id == self.id) {
            waiting.remove(&self.owner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_registered_waiter_is_handed_its_grant_and_others_are_not() {
        let admissions = Arc::new(Admissions::default());
        let (me, stranger) = (OwnerToken::random(), OwnerToken::random());
        let mut expecting = admissions.expect(me);
        let admitted = Admitted {
            token: FencingToken::new(7),
            sent_at: Some(Instant::now()),
        };
        assert!(!admissions.admit(stranger, admitted));
        assert!(expecting.try_admitted().is_none());
        assert!(admissions.admit(me, admitted));
        assert_eq!(expecting.admitted().await, admitted);
        // Taken: a second grant for the same owner finds nobody.
        assert!(!admissions.admit(me, admitted));
    }

    #[test]
    fn a_dropped_registration_is_withdrawn() {
        let admissions = Arc::new(Admissions::default());
        let me = OwnerToken::random();
        drop(admissions.expect(me));
        let admitted = Admitted {
            token: FencingToken::new(1),
            sent_at: None,
        };
        assert!(!admissions.admit(me, admitted));
    }
}
