//! What the code running under a held lock reads: its name, fencing token,
//! lease and state, with one rule for the state everywhere — `Lost` from the
//! lease's deadline on, even before the keep-alive task has run to say so
//! (a busy or paused runtime).

use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kind::LockKind;
use crate::lease::Lease;
use crate::name::LockName;
use crate::state::LockState;
use crate::token::FencingToken;

/// A cheap, cloneable view of a held lock for the code running under it: its
/// name, fencing token, lease and lost signal. A [`LockGuard`](crate::LockGuard)
/// dereferences to its handle.
#[derive(Clone)]
pub struct LockHandle {
    pub(crate) name: LockName,
    pub(crate) kind: LockKind,
    pub(crate) token: FencingToken,
    pub(crate) lease: Arc<Mutex<Lease>>,
    pub(crate) state: watch::Receiver<LockState>,
    pub(crate) lost: CancellationToken,
}

impl LockHandle {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token of this grant; pass it to the protected resource.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// What is held: the lock, a permit, or a side of a read-write lock.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lease as last renewed: how long the lock is still ours is
    /// [`Lease::remaining`].
    pub fn lease(&self) -> Lease {
        self.lease.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the lease's deadline has passed; reads it in place, since
    /// `state` and `is_lost` run on every release.
    fn expired(&self) -> bool {
        expired(&self.lease)
    }

    /// The state now: `Lost` from the lease's deadline on, even before the
    /// keep-alive task has run to say so.
    pub fn state(&self) -> LockState {
        ruled(*self.state.borrow(), &self.lease)
    }

    /// Whether the lock has been lost (or its lease has run out).
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || self.expired()
    }

    /// Completes when the lock is lost, at the latest at the lease's
    /// deadline (at once if it already is).
    pub async fn lost(&self) {
        loop {
            if self.is_lost() {
                return;
            }
            let deadline = self.lease().deadline();
            tokio::select! {
                () = self.lost.cancelled() => return,
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// A token cancelled when the keep-alive task finds the lock lost, to
    /// hand to code that already takes a `CancellationToken`. On a runtime
    /// too busy to run that task it can come after the deadline;
    /// [`LockHandle::is_lost`] and [`LockHandle::lost`] never do.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Every change of state from now on (`Held ⇄ AtRisk → Lost`), with
    /// the same rule as [`LockHandle::state`].
    pub fn watch(&self) -> StateWatch {
        let mut published = self.state.clone();
        let seen = ruled(*published.borrow_and_update(), &self.lease);
        StateWatch {
            published,
            lease: self.lease.clone(),
            seen,
        }
    }
}

impl fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockHandle")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("state", &self.state())
            .finish()
    }
}

/// The changes of one lock's state, from [`LockHandle::watch`]. A watcher
/// that keeps up sees each change in order; a slow one skips to the latest.
#[derive(Debug)]
pub struct StateWatch {
    published: watch::Receiver<LockState>,
    lease: Arc<Mutex<Lease>>,
    seen: LockState,
}

impl StateWatch {
    /// The state now.
    pub fn state(&self) -> LockState {
        ruled(*self.published.borrow(), &self.lease)
    }

    /// Waits for the state to differ from the one last returned (or the
    /// one when the watch began) and returns it; `None` after `Lost`, which
    /// is final, or once the guard is gone.
    pub async fn changed(&mut self) -> Option<LockState> {
        loop {
            if self.seen == LockState::Lost {
                return None;
            }
            let now = ruled(*self.published.borrow_and_update(), &self.lease);
            if now != self.seen {
                self.seen = now;
                return Some(now);
            }
            let deadline = self
                .lease
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .deadline();
            tokio::select! {
                open = self.published.changed() => if open.is_err() {
                    return None;
                },
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

fn expired(lease: &Mutex<Lease>) -> bool {
    lease.lock().unwrap_or_else(|p| p.into_inner()).is_expired()
}

/// The published state, `Lost` once the lease's deadline has passed.
fn ruled(published: LockState, lease: &Mutex<Lease>) -> LockState {
    if published != LockState::Lost && expired(lease) {
        LockState::Lost
    } else {
        published
    }
}
