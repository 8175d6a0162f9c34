//! Keep-alive tasks started only when a lease first needs renewing.
//!
//! Most locks are held for far less than a third of their TTL. Spawning a
//! renewal task for each of them, and aborting it at release, cost two task
//! switches per lock — often a wake-up of another worker thread, which on a
//! small machine competes with the lock server for a core. Instead a guard
//! parks its keep-alive here, and one driver task per [`RenewalQueue`]
//! starts it when its first renewal is due. A guard released before then
//! costs one map insert and one removal, and wakes nobody.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

use crate::renewal::KeepAlive;

/// Where a parked keep-alive sits: its start time, then a tiebreaker.
pub(crate) type Ticket = (Instant, u64);

/// Parked keep-alives, shared by a [`Locker`](crate::Locker), its clones and
/// every guard they hand out.
#[derive(Default)]
pub(crate) struct RenewalQueue {
    state: Mutex<Parked>,
    /// Wakes the driver when a keep-alive is due before the driver would
    /// otherwise look, or when the queue is dropped.
    wake: Arc<Notify>,
}

#[derive(Default)]
struct Parked {
    due: BTreeMap<Ticket, (KeepAlive, tracing::Span)>,
    next_id: u64,
    driver: Driver,
    /// How far ahead the latest keep-alive was parked, and whether any was
    /// parked since the driver last looked (see [`RenewalQueue::start_due`]).
    latest_delay: Duration,
    parked_since_look: bool,
}

/// What the driver task is doing.
#[derive(Default)]
enum Driver {
    /// No driver (none yet, or its runtime shut down).
    #[default]
    Stopped,
    /// Asleep until this instant, or until woken if `None`.
    Sleeping(Option<Instant>),
}

impl RenewalQueue {
    fn parked(&self) -> MutexGuard<'_, Parked> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks `keep_alive` until `due`, when the driver spawns it inside
    /// `span`. Needs a Tokio runtime when no driver is running.
    pub(crate) fn park(
        self: &Arc<Self>,
        due: Instant,
        keep_alive: KeepAlive,
        span: tracing::Span,
    ) -> Ticket {
        let mut parked = self.parked();
        let ticket = (due, parked.next_id);
        parked.next_id += 1;
        parked.latest_delay = due.saturating_duration_since(Instant::now());
        parked.parked_since_look = true;
        parked.due.insert(ticket, (keep_alive, span));
        match parked.driver {
            Driver::Stopped => {
                // The new driver reads the queue before it first sleeps.
                parked.driver = Driver::Sleeping(Some(Instant::now()));
                tokio::spawn(drive(Arc::downgrade(self), self.wake.clone()));
            }
            // With equal TTLs every new lease is due after those parked
            // before it, so this is the common case and wakes nobody.
            Driver::Sleeping(Some(wakes_at)) if wakes_at <= due => {}
            Driver::Sleeping(_) => self.wake.notify_one(),
        }
        ticket
    }

    /// Forgets a keep-alive that has not started; `false` if it already did
    /// (its stop token then ends it).
    pub(crate) fn cancel(&self, ticket: Ticket) -> bool {
        self.parked().due.remove(&ticket).is_some()
    }

    /// Spawns every keep-alive due by now and says when the next one is.
    fn start_due(&self) -> Option<Instant> {
        let mut parked = self.parked();
        let now = Instant::now();
        while let Some(entry) = parked.due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (keep_alive, span) = entry.remove();
            tokio::spawn(keep_alive.run().instrument(span));
        }
        // A queue emptied by releases while guards keep coming is the common
        // case: sleeping until woken would make every new guard wake the
        // driver (a task switch per lock, often onto the other worker
        // thread). Looking again one parking delay from now instead lets
        // guards parked meanwhile, due later than that, wake nobody; once a
        // whole delay passes with nothing parked, the driver sleeps until
        // woken.
        let next = parked
            .due
            .first_key_value()
            .map(|(ticket, _)| ticket.0)
            .or_else(|| parked.parked_since_look.then(|| now + parked.latest_delay));
        parked.parked_since_look = false;
        parked.driver = Driver::Sleeping(next);
        next
    }
}

impl Drop for RenewalQueue {
    fn drop(&mut self) {
        // Nothing is parked any more (every guard holds the queue), so the
        // driver may go.
        self.wake.notify_one();
    }
}

/// The driver: starts keep-alives as they fall due, until the queue is gone.
async fn drive(queue: Weak<RenewalQueue>, wake: Arc<Notify>) {
    let _stopped = MarkStopped(queue.clone());
    loop {
        let Some(next) = queue.upgrade().map(|q| q.start_due()) else {
            return;
        };
        let sleep = async {
            match next {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            () = wake.notified() => {}
        }
    }
}

/// Marks the driver stopped however its task ends, including when its
/// runtime shuts down, so the next [`RenewalQueue::park`] starts another.
struct MarkStopped(Weak<RenewalQueue>);

impl Drop for MarkStopped {
    fn drop(&mut self) {
        if let Some(queue) = self.0.upgrade() {
            queue.parked().driver = Driver::Stopped;
        }
    }
}
