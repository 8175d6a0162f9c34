//! [`SingleFlight`]: one attempt at a time at something every caller of a
//! backend may need at once (a connection, a session, a proof that a lease
//! lives), whose outcome every caller that came while it ran shares.
//!
//! A lock held across the attempt gives "one at a time" too, but a caller
//! that finds the attempt failed when it gets the lock makes its own: the
//! N-th caller in line waits for N failed attempts, N times the timeout of
//! one. Here a caller joins the attempt under way, and gets its outcome,
//! success or failure, in at most the time that attempt has left.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};

/// What an attempt ended with, as every caller that joined it reads it.
type Outcome<T> = std::result::Result<T, Arc<Error>>;

/// The attempt under way, if any: a receiver of its outcome, `None` until
/// it lands.
type Slot<T> = Arc<Mutex<Option<watch::Receiver<Option<Outcome<T>>>>>>;

/// One attempt at a time, shared by every caller that comes while it runs.
///
/// The attempt runs in a task of its own: a caller that stops waiting (its
/// own deadline passed, its future was dropped) does not cut it off for
/// the others, and what it makes (a session, a connection) is kept by the
/// attempt itself for whoever asks next. Clones share the attempt.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use lock_core::backend::SingleFlight;
///
/// let connecting = SingleFlight::new();
/// let limit = Duration::from_secs(1);
/// let (a, b) = tokio::join!(
///     connecting.run("connect", limit, || async { Ok(1) }),
///     // Joins the attempt above: this one never runs.
///     connecting.run("connect", limit, || async { Ok(2) }),
/// );
/// assert_eq!((a.unwrap(), b.unwrap()), (1, 1));
/// # }
/// ```
pub struct SingleFlight<T> {
    slot: Slot<T>,
}

impl<T> SingleFlight<T> {
    /// No attempt under way.
    pub fn new() -> Self {
        Self {
            slot: Arc::new(Mutex::new(None)),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<watch::Receiver<Option<Outcome<T>>>>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an attempt is under way now.
    pub fn is_running(&self) -> bool {
        self.slot().is_some()
    }
}

impl<T: Clone + Send + Sync + 'static> SingleFlight<T> {
    /// The outcome of the attempt under way, or, if there is none, of
    /// `attempt`, started now in a task of its own. The caller waits at
    /// most `within` (its own deadline; the attempt should be bounded by
    /// as much), then gets [`Error::Timeout`] for `operation` while the
    /// attempt goes on for the others. A failure is every waiter's: each
    /// gets the same error (its source shared).
    ///
    /// Must be called within a Tokio runtime.
    pub async fn run<F, Fut>(
        &self,
        operation: &'static str,
        within: Duration,
        attempt: F,
    ) -> Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut outcome = self.join_or_start(attempt);
        let landed = tokio::time::timeout(within, outcome.wait_for(Option::is_some)).await;
        let Ok(landed) = landed else {
            return Err(Error::timeout(operation, within));
        };
        match landed.as_deref() {
            Ok(Some(Ok(value))) => Ok(value.clone()),
            Ok(Some(Err(e))) => Err(Error::shared(e)),
            // The task ended without an outcome: it panicked, or the
            // runtime is shutting down.
            Ok(None) | Err(_) => Err(Error::backend(format!(
                "{operation} stopped before it had an outcome"
            ))),
        }
    }

    /// A receiver of the attempt under way, or of `attempt`, started now.
    fn join_or_start<F, Fut>(&self, attempt: F) -> watch::Receiver<Option<Outcome<T>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut slot = self.slot();
        // A sender gone without an outcome is an attempt that died: start
        // another instead of waiting on it.
        if let Some(running) = slot.as_ref().filter(|r| r.has_changed().is_ok()) {
            return running.clone();
        }
        let (done, running) = watch::channel(None);
        *slot = Some(running.clone());
        let future = attempt();
        let shared = self.slot.clone();
        tokio::spawn(async move {
            let outcome = future.await.map_err(Arc::new);
            // Whoever comes from now on starts a new attempt; those that
            // joined this one read its outcome from their receivers.
            let mut slot = shared.lock().unwrap_or_else(|p| p.into_inner());
            if slot
                .as_ref()
                .is_some_and(|r| r.same_channel(&done.subscribe()))
            {
                *slot = None;
            }
            drop(slot);
            done.send_replace(Some(outcome));
        });
        running
    }
}

impl<T> Default for SingleFlight<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for SingleFlight<T> {
    fn clone(&self) -> Self {
        Self {
            slot: self.slot.clone(),
        }
    }
}

impl<T> std::fmt::Debug for SingleFlight<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleFlight")
            .field("running", &self.is_running())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tokio::time::{Instant, sleep};

    use super::*;

    /// An attempt that fails after `took`, counting its starts.
    fn failing(
        starts: &Arc<AtomicU32>,
        took: Duration,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = Result<u32>> + Send>> + use<> {
        let starts = starts.clone();
        move || {
            starts.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                sleep(took).await;
                Err(Error::timeout("connect", took))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn callers_that_come_while_an_attempt_fails_share_its_failure() {
        let flight = SingleFlight::new();
        let starts = Arc::new(AtomicU32::new(0));
        let took = Duration::from_secs(1);
        let started = Instant::now();
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let (flight, attempt) = (flight.clone(), failing(&starts, took));
            calls.spawn(async move { flight.run("connect", took * 2, attempt).await });
        }
        while let Some(outcome) = calls.join_next().await {
            let outcome = outcome.expect("no panic");
            assert!(
                matches!(outcome, Err(Error::Timeout { after, .. }) if after == took),
                "{outcome:?}"
            );
        }
        assert_eq!(starts.load(Ordering::SeqCst), 1, "one attempt");
        assert_eq!(started.elapsed(), took, "one attempt's time, not ten");
        assert!(!flight.is_running());
        // The next caller starts a new attempt.
        let _ = flight
            .run("connect", took * 2, failing(&starts, took))
            .await;
        assert_eq!(starts.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_stops_waiting_leaves_the_attempt_to_the_others() {
        let flight = SingleFlight::new();
        let slow = || async {
            sleep(Duration::from_secs(2)).await;
            Ok(7)
        };
        let impatient = flight.run("connect", Duration::from_secs(1), slow);
        let patient = flight.run("connect", Duration::from_secs(5), || async { Ok(0) });
        let (impatient, patient) = tokio::join!(impatient, patient);
        assert!(matches!(impatient, Err(Error::Timeout { .. })));
        assert_eq!(patient.unwrap(), 7, "the first attempt's outcome");
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_that_panicked_is_not_waited_on() {
        let flight: SingleFlight<u32> = SingleFlight::new();
        let died = flight
            .run("connect", Duration::from_secs(1), || async {
                panic!("boom")
            })
            .await;
        assert!(matches!(died, Err(Error::Backend { .. })), "{died:?}");
        let next = flight
            .run("connect", Duration::from_secs(1), || async { Ok(3) })
            .await;
        assert_eq!(next.unwrap(), 3);
    }
}
