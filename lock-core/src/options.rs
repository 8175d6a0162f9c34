//! How long to hold and how long to wait.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::kind::LockKind;
use crate::name::LockName;
use crate::token::OwnerToken;

/// How long an acquire may wait for a lock somebody else holds.
///
/// Whatever the wait, a lock found held when it ends is an error:
/// [`Error::Busy`] for [`Wait::No`] (as from every `try_*` method, which is
/// the same as asking with `Wait::No`), [`Error::WaitTimeout`] for a
/// [`Wait::For`] that ran out. [`Error::is_contention`] is true of both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Wait {
    /// Try once; fail with [`Error::Busy`] if the lock is held.
    No,
    /// Wait up to this long, then fail with [`Error::WaitTimeout`].
    For(Duration),
    /// Wait until the lock is granted (like a mutex). The wait itself has no
    /// limit, but every call to the backend inside it still has one.
    #[default]
    Forever,
}

/// How to acquire: the lease's TTL, how long to wait, and whether the task
/// that holds the lock may take it again. What is acquired (the lock, a
/// permit, a side of a read-write lock) is never an option: it is the
/// method called, so defaults set with
/// [`Locker::with_defaults`](crate::Locker::with_defaults) cannot turn one
/// kind of lock into another.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, Wait};
///
/// let opts = AcquireOptions::with_ttl(Duration::from_secs(10))
///     .wait(Wait::For(Duration::from_secs(2)))
///     .reentrant(true);
/// assert_eq!(opts.ttl, Duration::from_secs(10));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireOptions {
    /// How long the lease lasts unless renewed. [`LockGuard`](crate::LockGuard)
    /// renews it at a third of this.
    pub ttl: Duration,
    /// How long to wait for a held lock.
    pub wait: Wait,
    /// Whether a task that already holds the lock through this locker gets
    /// a second hold of the same grant instead of
    /// [`Error::AlreadyHeld`] (see [`AcquireOptions::reentrant`]).
    pub reentrant: bool,
}

impl AcquireOptions {
    /// The default TTL: long enough to ride out a slow renewal or two, short
    /// enough that a crashed holder's lock frees itself soon.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

    /// Options with this TTL and the default wait ([`Wait::Forever`]).
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl,
            wait: Wait::default(),
            reentrant: false,
        }
    }

    /// The same options with another TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The same options with another wait.
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// The same options, reentrant or not (the default).
    ///
    /// Reentrant, a task that already holds the mutex (or the write side of
    /// a read-write lock) through this locker, or a clone of it, gets a
    /// second guard of the same grant: the same lease and fencing token,
    /// renewed once. The lock is released when the last of its guards is
    /// released or dropped; [`LockGuard::holds`](crate::LockGuard::holds)
    /// counts them. A read asked for by a task holding the read or the
    /// write side shares that hold too. Semaphore permits are never shared:
    /// a second permit is a second permit. Held by another task, the lock
    /// is waited for as usual.
    ///
    /// Not reentrant, the task gets [`Error::AlreadyHeld`] at once, since
    /// waiting would wait on itself.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{AcquireOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let nested = AcquireOptions::default().reentrant(true);
    /// let outer = locker.lock_with("ledger", nested).await?;
    /// let inner = locker.lock_with("ledger", nested).await?;
    /// assert_eq!((inner.token(), inner.holds()), (outer.token(), 2));
    /// inner.release().await?;
    /// assert!(locker.try_lock("ledger").await.is_err()); // `outer` holds it
    /// outer.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn reentrant(mut self, on: bool) -> Self {
        self.reentrant = on;
        self
    }
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self::with_ttl(Self::DEFAULT_TTL)
    }
}

/// One acquisition attempt as a backend sees it: the name, the owner token the
/// lock will carry if granted, and the TTL (already checked against the
/// backend's [`Capabilities`](crate::Capabilities)).
///
/// The owner token is chosen before the first request is sent, so that an
/// attempt whose reply was lost can be recognised and undone (see
/// [`LockBackend::abandon`](crate::backend::LockBackend::abandon)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The lock.
    pub name: LockName,
    /// The owner token for this attempt.
    pub owner: OwnerToken,
    /// The lease length to ask for.
    pub ttl: Duration,
    /// What is asked for (checked against the backend's
    /// [`Capabilities`](crate::Capabilities) before it gets here).
    pub kind: LockKind,
    /// What a [`LockKind::Leader`] candidate proclaims if it leads (empty
    /// for other kinds): the backend stores it with the grant, where
    /// [`LockBackend::leader`](crate::backend::LockBackend::leader) reads it.
    pub value: String,
}

impl AcquireRequest {
    /// A request for the lock ([`LockKind::Exclusive`]) with a fresh random
    /// owner token.
    pub fn new(name: LockName, ttl: Duration) -> Self {
        Self {
            name,
            owner: OwnerToken::random(),
            ttl,
            kind: LockKind::Exclusive,
            value: String::new(),
        }
    }

    /// The shortest time a refused writer stays marked as waiting (see
    /// [`AcquireRequest::writer_mark`]): longer than any backend's pause
    /// between a waiter's attempts, each of which renews the mark.
    pub const WRITER_MARK: Duration = Duration::from_secs(2);

    /// How long a [`LockKind::Write`] request refused by a holder keeps
    /// arriving readers out: its TTL, but at least
    /// [`WRITER_MARK`](Self::WRITER_MARK), so that a short TTL does not let
    /// the mark lapse while the writer naps between attempts and readers
    /// slip in. A writer that gives up removes its mark (`abandon`); one
    /// that crashed keeps readers out this long.
    pub fn writer_mark(&self) -> Duration {
        self.ttl.max(Self::WRITER_MARK)
    }

    /// The same request for another kind of lock.
    pub fn with_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same request proclaiming `value` if it leads (see
    /// [`AcquireRequest::value`]).
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = value.into();
        self
    }
}

/// The budget of one waiting acquire: when it must give up, and a token that
/// cancels it early (the caller went away).
///
/// Backends that wait on the server use [`WaitBudget::sleep`] and
/// [`WaitBudget::until`] so that every backend times out and cancels the same
/// way. They also count on it what the acquire did, for the caller's span
/// and metrics: [`WaitBudget::attempted`] for every look at the server,
/// [`WaitBudget::waiting`] once the lock was found held and the acquire
/// waits for it.
#[derive(Debug)]
pub struct WaitBudget {
    wait: Wait,
    started: Instant,
    until: Option<Instant>,
    cancel: CancellationToken,
    attempts: AtomicU32,
    waited: AtomicBool,
}

impl Clone for WaitBudget {
    fn clone(&self) -> Self {
        Self {
            wait: self.wait,
            started: self.started,
            until: self.until,
            cancel: self.cancel.clone(),
            attempts: AtomicU32::new(self.attempts()),
            waited: AtomicBool::new(self.has_waited()),
        }
    }
}

impl WaitBudget {
    /// A budget for `wait`, starting now.
    pub fn new(wait: Wait, cancel: CancellationToken) -> Self {
        let started = Instant::now();
        let until = match wait {
            Wait::No => Some(started),
            // An absurdly long wait is the same as waiting forever; adding it
            // to the clock would overflow.
            Wait::For(d) => started.checked_add(d),
            Wait::Forever => None,
        };
        Self {
            wait,
            started,
            until,
            cancel,
            attempts: AtomicU32::new(0),
            waited: AtomicBool::new(false),
        }
    }

    /// Counts one look at the server for the lock: an attempt to take it,
    /// or a look at the queue after a wake-up.
    pub fn attempted(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes that the lock was held when asked and the acquire now waits
    /// for it.
    pub fn waiting(&self) {
        self.waited.store(true, Ordering::Relaxed);
    }

    /// The looks at the server counted so far.
    pub fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Whether the acquire has waited for a holder.
    pub fn has_waited(&self) -> bool {
        self.waited.load(Ordering::Relaxed)
    }

    /// A budget that never gives up and cannot be cancelled.
    pub fn forever() -> Self {
        Self::new(Wait::Forever, CancellationToken::new())
    }

    /// When the wait ends, if it ends.
    pub fn until(&self) -> Option<Instant> {
        self.until
    }

    /// The cancellation token of this wait.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the budget is spent or the wait was cancelled.
    pub fn is_over(&self) -> bool {
        self.cancel.is_cancelled() || self.until.is_some_and(|u| Instant::now() >= u)
    }

    /// Sleeps for `nap`, cut short by the end of the budget or cancellation.
    /// Returns `false` when the wait is over and the caller should stop.
    pub async fn sleep(&self, nap: Duration) -> bool {
        let wake = Instant::now() + nap;
        let wake = self.until.map_or(wake, |u| wake.min(u));
        tokio::select! {
            () = tokio::time::sleep_until(wake) => !self.is_over(),
            () = self.cancel.cancelled() => false,
        }
    }

    /// Runs `fut` until it finishes or the wait is over (`None`).
    pub async fn race<F: std::future::Future>(&self, fut: F) -> Option<F::Output> {
        let deadline = async {
            match self.until {
                Some(u) => tokio::time::sleep_until(u).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = fut => Some(out),
            () = deadline => None,
            () = self.cancel.cancelled() => None,
        }
    }

    /// The error to return for `name` when the budget ran out:
    /// [`Error::Busy`] for [`Wait::No`], [`Error::WaitTimeout`] otherwise.
    pub fn exhausted(&self, name: &LockName) -> Error {
        match self.wait {
            Wait::No => Error::Busy {
                name: name.to_string(),
            },
            _ => Error::WaitTimeout {
                name: name.to_string(),
                waited: self.started.elapsed(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn absurd_waits_do_not_overflow() {
        let b = WaitBudget::new(Wait::For(Duration::MAX), CancellationToken::new());
        assert_eq!(b.until(), None);
        assert!(!b.is_over());
    }

    #[tokio::test]
    async fn no_wait_is_over_at_once_and_reports_busy() {
        let b = WaitBudget::new(Wait::No, CancellationToken::new());
        assert!(b.is_over());
        assert!(!b.sleep(Duration::from_secs(60)).await);
        let name = LockName::new("x").unwrap();
        assert!(matches!(b.exhausted(&name), Error::Busy { .. }));
    }

    #[tokio::test]
    async fn cancellation_ends_a_sleep() {
        let cancel = CancellationToken::new();
        let b = WaitBudget::new(Wait::Forever, cancel.clone());
        cancel.cancel();
        assert!(!b.sleep(Duration::from_secs(3600)).await);
    }
}
