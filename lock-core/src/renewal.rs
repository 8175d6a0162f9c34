//! The background task that keeps a lease alive and raises the lost signal.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::backend::LockBackend;
use crate::error::Error;
use crate::lease::Lease;
use crate::metrics::{self, Labels};
use crate::state::LockState;

/// Renew at this fraction of the TTL, leaving two more chances before the
/// deadline if a renewal fails.
const RENEW_FRACTION: u32 = 3;

/// The state a guard's holders see, and the token cancelled when it is lost.
pub(crate) struct LostSignal {
    state: watch::Sender<LockState>,
    lost: CancellationToken,
    labels: Labels,
}

impl LostSignal {
    pub(crate) fn new(
        state: watch::Sender<LockState>,
        lost: CancellationToken,
        labels: Labels,
    ) -> Self {
        Self {
            state,
            lost,
            labels,
        }
    }

    pub(crate) fn labels(&self) -> &Labels {
        &self.labels
    }

    pub(crate) fn set(&self, next: LockState) {
        self.state.send_if_modified(|s| {
            let changed = *s != next && *s != LockState::Lost;
            if changed {
                *s = next;
            }
            changed
        });
    }

    fn at_risk(&self, lease: &Lease, error: &Error) {
        metrics::renew_failed(&self.labels);
        if *self.state.borrow() == LockState::Held {
            tracing::warn!(error = %error, remaining = ?lease.remaining(), "renewal failed; lock at risk");
            metrics::at_risk(&self.labels);
        }
        self.set(LockState::AtRisk);
    }

    pub(crate) fn lost(&self, lease: &Lease, why: &str) {
        if self.lost.is_cancelled() {
            return;
        }
        tracing::warn!(lock = %lease.name(), token = %lease.token(), reason = why, "lock lost");
        metrics::lost(&self.labels);
        self.set(LockState::Lost);
        self.lost.cancel();
    }
}

/// What a guard and its keep-alive share to renew one lease.
pub(crate) struct Renewing {
    /// Renewals of one lease go one at a time: the server applies
    /// concurrent ones in any order, and the lease kept here must be the one
    /// it applied last, or a renewal with a shorter TTL could leave the
    /// local deadline after the server's.
    pub(crate) serial: tokio::sync::Mutex<()>,
    pub(crate) signal: LostSignal,
    /// Told when the guard renewed the lease itself, so the keep-alive
    /// plans its next renewal from the new lease.
    pub(crate) renewed: Notify,
}

impl Renewing {
    pub(crate) fn new(signal: LostSignal) -> Self {
        Self {
            serial: tokio::sync::Mutex::new(()),
            signal,
            renewed: Notify::new(),
        }
    }
}

/// Renews one lease until stopped or lost.
pub(crate) struct KeepAlive {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) lease: Arc<Mutex<Lease>>,
    pub(crate) renewing: Arc<Renewing>,
    pub(crate) stop: CancellationToken,
}

impl KeepAlive {
    fn current(&self) -> Lease {
        self.lease.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// When the keep-alive must start: at the first renewal, a third of the
    /// TTL after the grant was *sent*, and never after the lease's deadline.
    /// Counting from when the guard was built instead would let a grant
    /// whose reply came late stay `Held` past its deadline, since nothing
    /// watches the deadline until the keep-alive runs.
    pub(crate) fn first_renewal(lease: &Lease) -> Instant {
        (lease.sent_at() + lease.ttl() / RENEW_FRACTION).min(lease.deadline())
    }

    /// Renews at once (it is started when the first renewal is due), then
    /// every third of the TTL, until stopped or lost. The TTL is the
    /// lease's, which [`LockGuard::extend`](crate::LockGuard::extend) may
    /// change.
    pub(crate) async fn run(self) {
        let signal = &self.renewing.signal;
        let mut next = Instant::now();
        loop {
            let lease = self.current();
            tokio::select! {
                // A stopped guard was released: renewing it now would only
                // find it gone and raise a false lost signal.
                biased;
                () = self.stop.cancelled() => return,
                () = sleep_until(lease.deadline()) => {
                    return signal.lost(&lease, "the lease ran out before it could be renewed");
                }
                () = self.renewing.renewed.notified() => {
                    // Renewed just now by the guard, maybe with another TTL.
                    let lease = self.current();
                    next = (Instant::now() + lease.ttl() / RENEW_FRACTION).min(lease.deadline());
                    continue;
                }
                () = sleep_until(next) => {}
            }
            let _serial = tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                () = sleep_until(lease.deadline()) => {
                    return signal.lost(&lease, "the lease ran out while a renewal was pending");
                }
                serial = self.renewing.serial.lock() => serial,
            };
            // The guard may have renewed while this waited for its turn.
            let lease = self.current();
            let ttl = lease.ttl();
            let sent = Instant::now();
            let span = tracing::info_span!("renew", ttl = ?ttl);
            let outcome = tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                () = sleep_until(lease.deadline()) => {
                    return signal.lost(&lease, "the lease ran out while a renewal was pending");
                }
                r = tracing::Instrument::instrument(self.backend.renew(&lease, ttl), span) => r,
            };
            match outcome {
                Ok(renewed) => {
                    // The backend's TTL, which a session may set.
                    next = (sent + renewed.ttl() / RENEW_FRACTION).min(renewed.deadline());
                    *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = renewed;
                    signal.set(LockState::Held);
                }
                Err(Error::NotHeld { .. }) => {
                    return signal.lost(
                        &lease,
                        "the backend says another owner has the lock or it expired",
                    );
                }
                Err(e) => {
                    // Any other failure leaves the lease valid until its
                    // deadline; keep trying until then.
                    signal.at_risk(&lease, &e);
                    next = Instant::now()
                        + (ttl / 10).clamp(Duration::from_millis(5), Duration::from_secs(1));
                }
            }
        }
    }
}
