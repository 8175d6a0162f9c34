//! Waiting for a held lock: jittered backoff polling, and in-process release
//! signals that wake a waiter at once when the release happens in the same
//! process.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;

use crate::admitted::Admissions;
use crate::error::Result;
use crate::lease::Lease;
use crate::name::LockName;
use crate::options::{AcquireRequest, WaitBudget};
use crate::per_name::{Entry, PerName};

/// How a polling waiter learns that it may try again: the in-process
/// release signals that wake it at once (a backend's own, or its server's
/// announcements fed into them), and the backoff between attempts, whose
/// cap is how often it re-checks at the latest.
#[derive(Debug, Default)]
pub struct Waking<'a> {
    signals: Option<&'a ReleaseSignals>,
    admissions: Option<&'a Arc<Admissions>>,
    backoff: Backoff,
}

impl<'a> Waking<'a> {
    /// Polling only, with the default [`Backoff`].
    pub fn polling() -> Self {
        Self::default()
    }

    /// Woken by `signals` as well as polling.
    pub fn signalled(signals: &'a ReleaseSignals) -> Self {
        Self {
            signals: Some(signals),
            admissions: None,
            backoff: Backoff::new(),
        }
    }

    /// Granted, too, by a release in this process that admits the waiter
    /// on the server (see [`Admissions`]): the wait ends with that grant
    /// without another attempt.
    pub fn admitted_by(mut self, admissions: &'a Arc<Admissions>) -> Self {
        self.admissions = Some(admissions);
        self
    }

    /// Re-checks at least every `cap`: a backend whose server wakes
    /// waiters polls only as a safety net, with a longer cap.
    pub fn cap(mut self, cap: Duration) -> Self {
        self.backoff = Backoff::with_cap(cap);
        self
    }
}

/// One attempt at a lock: all the polling loop needs of a backend, so
/// that this file does not name the backend trait (`backend.rs` implements
/// it for every backend).
pub(crate) trait Attempt: Sync {
    fn attempt<'a>(
        &'a self,
        req: &'a AcquireRequest,
    ) -> impl Future<Output = Result<Option<Lease>>> + Send + 'a;
}

/// The waiting loop of the backends' `poll_acquire`: attempts until one
/// grants, with jittered exponential backoff, woken early by `waking`'s
/// signals when a release happens in this process.
///
/// Retryable backend errors (a dropped connection, a busy database) are
/// retried within the budget; the last one is returned if the budget runs out
/// after it.
pub(crate) async fn poll<A: Attempt + ?Sized>(
    backend: &A,
    req: &AcquireRequest,
    budget: &WaitBudget,
    waking: Waking<'_>,
) -> Result<Lease> {
    let Waking {
        signals,
        admissions,
        mut backoff,
    } = waking;
    let wake = signals.map(|s| s.subscribe(&req.name));
    // Registered before the first attempt: a release answered at any time
    // after the server refused it, and so took it as a waiter it may admit,
    // finds it here.
    let mut expecting = admissions.map(|a| a.expect(req.owner));
    loop {
        // Listening from before the attempt: a release announced while the
        // attempt is on its way still wakes this waiter, even by
        // `notify_all`, which keeps nothing for waiters not yet listening.
        let notified = wake.as_deref().map(|w| w.notified());
        let mut notified = std::pin::pin!(notified);
        if let Some(listening) = notified.as_mut().as_pin_mut() {
            listening.enable();
        }
        budget.attempted();
        let sent_at = tokio::time::Instant::now();
        let failure = match backend.attempt(req).await {
            Ok(Some(lease)) => return Ok(lease),
            Ok(None) => None,
            Err(e) if e.is_transient() => {
                tracing::debug!(lock = %req.name, error = %e, "acquire attempt failed; retrying");
                Some(e)
            }
            Err(e) => return Err(e),
        };
        if budget.is_over() {
            return Err(failure.unwrap_or_else(|| budget.exhausted(&req.name)));
        }
        if failure.is_none() {
            budget.waiting();
        }
        let nap = backoff.next_nap();
        let woken = async {
            match notified.as_mut().as_pin_mut() {
                Some(listening) => listening.await,
                None => std::future::pending().await,
            }
        };
        let admitted = async {
            match expecting.as_mut() {
                Some(expecting) => Some(expecting.admitted().await),
                None => std::future::pending().await,
            }
        };
        let mut grant = None;
        tokio::select! {
            () = woken => {}
            admitted = admitted => grant = admitted,
            go_on = budget.sleep(nap) => if !go_on {
                return Err(failure.unwrap_or_else(|| budget.exhausted(&req.name)));
            },
        }
        // A wake-up and the caller's cancellation can be ready together; a
        // caller that is gone must not be granted the lock it let go of.
        // Told by a notice, the waiter may have been admitted just before.
        let grant = grant.or_else(|| expecting.as_mut().and_then(|e| e.try_admitted()));
        if budget.cancel_token().is_cancelled() {
            return Err(failure.unwrap_or_else(|| budget.exhausted(&req.name)));
        }
        if let Some(admitted) = grant {
            let since = admitted.sent_at.unwrap_or(sent_at);
            return Ok(Lease::granted(req, admitted.token, since));
        }
    }
}

/// Exponential backoff from 2 ms to a cap (100 ms by default) with "equal jitter" (each nap is
/// random between half and all of the current step), so colliding clients
/// spread out instead of polling in lock-step.
#[derive(Debug)]
pub struct Backoff {
    step: Duration,
    cap: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(2);
    const CAP: Duration = Duration::from_millis(100);

    /// A backoff at its first step, capped at 100 ms.
    pub fn new() -> Self {
        Self::with_cap(Self::CAP)
    }

    /// A backoff whose step stops growing at `cap`.
    pub fn with_cap(cap: Duration) -> Self {
        Self {
            step: Self::FIRST.min(cap),
            cap,
        }
    }

    /// The next nap; the step doubles up to the cap.
    pub fn next_nap(&mut self) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(self.cap);
        let half = step / 2;
        half + half.mul_f64(rand::rng().random::<f64>())
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

/// The retry rule of a backend that waits on the server (etcd, ZooKeeper):
/// an attempt that failed on [transient](crate::Error::is_transient)
/// trouble — a lost connection, an election, an expired session — is tried
/// again after a backoff nap, within the wait's budget; contention and
/// every other error end the wait.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use lock_core::backend::{Backoff, Retry, WaitBudget};
/// use lock_core::Error;
///
/// let budget = WaitBudget::forever();
/// let mut retry = Retry::new("example", &budget, Backoff::new());
/// let mut tries = 0;
/// let outcome: Result<u32, Error> = loop {
///     tries += 1;
///     let attempt = if tries < 3 {
///         Err(Error::timeout("acquire", Default::default()))
///     } else {
///         Ok(tries)
///     };
///     match attempt {
///         Ok(granted) => break Ok(granted),
///         Err(e) => {
///             if let Err(e) = retry.after(e).await {
///                 break Err(e);
///             }
///         }
///     }
/// };
/// assert_eq!(outcome.unwrap(), 3);
/// assert_eq!(retry.attempts(), 2);
/// # }
/// ```
#[derive(Debug)]
pub struct Retry<'a> {
    backend: &'static str,
    budget: &'a WaitBudget,
    backoff: Backoff,
    failed: u32,
}

impl<'a> Retry<'a> {
    /// The rule for one wait of `backend` (for the log) within `budget`.
    pub fn new(backend: &'static str, budget: &'a WaitBudget, backoff: Backoff) -> Self {
        Self {
            backend,
            budget,
            backoff,
            failed: 0,
        }
    }

    /// Decides after a failed attempt: `Ok(())` once the nap is over and
    /// the next attempt may start, or the error that ends the wait.
    pub async fn after(&mut self, error: crate::Error) -> crate::Result<()> {
        self.failed += 1;
        if !error.is_transient() || self.budget.is_over() {
            return Err(error);
        }
        tracing::debug!(backend = self.backend, error = %error, "waiting for a lock failed; trying again");
        if self.budget.sleep(self.backoff.next_nap()).await {
            Ok(())
        } else {
            Err(error)
        }
    }

    /// How many attempts have failed so far.
    pub fn attempts(&self) -> u32 {
        self.failed
    }
}

/// Per-name wake-ups for waiters in this process.
///
/// A backend calls [`ReleaseSignals::notify`] after each successful release;
/// it wakes one local waiter of that name, which tries at once instead of at
/// its next poll. Waiters in other processes still poll. Backends with
/// server-side notifications (pub/sub, LISTEN) feed those into the same
/// registry.
#[derive(Debug, Default)]
pub struct ReleaseSignals {
    waiters: PerName<Notify>,
    wakeups: AtomicU64,
}

impl ReleaseSignals {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The wake-up handle for `name`, shared by every local waiter of it;
    /// the name's entry goes when the last handle does.
    pub fn subscribe(
        &self,
        name: &LockName,
    ) -> impl std::ops::Deref<Target = Notify> + Send + Sync + 'static {
        Subscription(self.waiters.get_or_make(name))
    }

    /// Wakes one local waiter of `name`, if there is one.
    pub fn notify(&self, name: &LockName) {
        if let Some(notify) = self.waiters.get(name) {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            notify.notify_one();
        }
    }

    /// Wakes every local waiter of `name`: for a release that may let
    /// several of them in at once (a writer's, which readers wait for).
    /// Counts one wake-up per release, as [`notify`](Self::notify) does.
    pub fn notify_all(&self, name: &LockName) {
        if let Some(notify) = self.waiters.get(name) {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            notify.notify_waiters();
        }
    }

    /// How many wake-ups were sent so far: what a backend feeding these
    /// signals reports as [`BackendStats::wakeups`](crate::stats::BackendStats::wakeups).
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// The [`BackendStats`](crate::stats::BackendStats) of a backend whose waiters
    /// these signals wake: `wakeups`.
    pub fn stats(&self) -> crate::stats::BackendStats {
        crate::stats::BackendStats::default().with_wakeups(self.wakeups())
    }
}

/// A name's wake-up handle, keeping the name's entry.
struct Subscription(Arc<Entry<Notify>>);

impl std::ops::Deref for Subscription {
    type Target = Notify;

    fn deref(&self) -> &Notify {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_with_jitter() {
        let mut b = Backoff::new();
        let naps: Vec<_> = (0..12).map(|_| b.next_nap()).collect();
        assert!(naps[0] <= Backoff::FIRST && naps[0] >= Backoff::FIRST / 2);
        assert!(naps.iter().all(|n| *n <= Backoff::CAP));
        assert!(naps[11] >= Backoff::CAP / 2);
    }

    /// Counts attempts; the lock is always held by somebody else.
    #[derive(Debug, Default)]
    struct AlwaysHeld {
        attempts: AtomicU64,
    }

    impl Attempt for AlwaysHeld {
        async fn attempt(&self, _: &AcquireRequest) -> Result<Option<Lease>> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            Ok(None)
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_cancelled_wait_woken_at_the_same_time_tries_no_more() {
        let name = LockName::new("a").unwrap();
        // `select!` picks among ready branches at random: repeat so a loop
        // that tried again after the wake-up would show it.
        for _ in 0..32 {
            let backend = Arc::new(AlwaysHeld::default());
            let signals = Arc::new(ReleaseSignals::new());
            let cancel = tokio_util::sync::CancellationToken::new();
            let budget = WaitBudget::new(crate::Wait::Forever, cancel.clone());
            let req = AcquireRequest::new(name.clone(), Duration::from_secs(10));
            let wait = {
                let (backend, signals) = (backend.clone(), signals.clone());
                tokio::spawn(async move {
                    poll(&*backend, &req, &budget, Waking::signalled(&signals)).await
                })
            };
            // The first attempt failed and the waiter sleeps.
            while backend.attempts.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            tokio::task::yield_now().await;
            cancel.cancel();
            signals.notify(&name);
            assert!(wait.await.unwrap().is_err());
            assert_eq!(backend.attempts.load(Ordering::SeqCst), 1);
        }
    }

    /// Refuses the first attempt, and while it is on its way the holder's
    /// release wakes every waiter (a writer's release: `notify_all`); grants
    /// the second.
    #[derive(Debug)]
    struct ReleasedDuringTheAttempt {
        signals: Arc<ReleaseSignals>,
        attempts: AtomicU64,
    }

    impl Attempt for ReleasedDuringTheAttempt {
        async fn attempt(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
            if self.attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                self.signals.notify_all(&req.name);
                return Ok(None);
            }
            let token = crate::FencingToken::new(1);
            Ok(Some(Lease::granted(
                req,
                token,
                tokio::time::Instant::now(),
            )))
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_release_announced_while_the_attempt_is_on_its_way_is_not_missed() {
        let signals = Arc::new(ReleaseSignals::new());
        let backend = ReleasedDuringTheAttempt {
            signals: signals.clone(),
            attempts: AtomicU64::new(0),
        };
        let req = AcquireRequest::new(LockName::new("a").unwrap(), Duration::from_secs(10));
        let budget = WaitBudget::forever();
        let started = tokio::time::Instant::now();
        let cap = Duration::from_secs(1);
        let waking = Waking::signalled(&signals).cap(cap);
        poll(&backend, &req, &budget, waking)
            .await
            .expect("granted");
        assert_eq!(backend.attempts.load(Ordering::SeqCst), 2);
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the waiter slept through the release that let it in"
        );
    }

    /// A waiter that the backend never lets in still ends with the grant
    /// a release admitted it to, from a release sent here (its send time
    /// starts the lease) or from a notice (the waiter's last refused
    /// attempt does), and asks no more once told.
    #[tokio::test(flavor = "current_thread")]
    async fn an_admitted_waiter_ends_with_its_grant() {
        for from_here in [true, false] {
            let backend = Arc::new(AlwaysHeld::default());
            let signals = Arc::new(ReleaseSignals::new());
            let admissions = Arc::new(Admissions::default());
            let req = AcquireRequest::new(LockName::new("a").unwrap(), Duration::from_secs(10));
            let owner = req.owner;
            let wait = {
                let (backend, signals, admissions) =
                    (backend.clone(), signals.clone(), admissions.clone());
                tokio::spawn(async move {
                    let waking = Waking::signalled(&signals)
                        .cap(Duration::from_secs(3600))
                        .admitted_by(&admissions);
                    poll(&*backend, &req, &WaitBudget::forever(), waking).await
                })
            };
            // Registered before its first attempt, refused, and waiting.
            while backend.attempts.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            let released = tokio::time::Instant::now();
            let token = crate::FencingToken::new(42);
            let sent_at = from_here.then_some(released);
            assert!(admissions.admit(owner, crate::admitted::Admitted { token, sent_at }));
            let attempts = backend.attempts.load(Ordering::SeqCst);
            let lease = wait.await.unwrap().expect("admitted");
            assert_eq!(lease.token(), token);
            assert_eq!(lease.owner(), owner);
            if from_here {
                assert_eq!(lease.sent_at(), released);
            } else {
                assert!(lease.sent_at() < released, "from its last attempt");
            }
            assert_eq!(backend.attempts.load(Ordering::SeqCst), attempts);
        }
    }

    #[test]
    fn signals_forget_names_nobody_waits_on() {
        let s = ReleaseSignals::new();
        let a = LockName::new("a").unwrap();
        let held = s.subscribe(&a);
        assert!(std::ptr::eq(&*held, &*s.subscribe(&a)));
        drop(held);
        assert_eq!(s.waiters.len(), 0, "gone with its last waiter");
        let _b = s.subscribe(&LockName::new("b").unwrap());
        assert_eq!(s.waiters.len(), 1);
    }
}
