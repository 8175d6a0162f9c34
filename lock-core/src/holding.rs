//! One grant as held by this process: the keep-alive that renews its lease,
//! the marks that count it held, and its release. Every
//! [`LockGuard`](crate::LockGuard) of the grant shares one; a reentrant
//! hold is a second guard of the same `Holding`, and the grant is released
//! when the last guard lets go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::handle::LockHandle;
use crate::held::HeldMark;
use crate::lease::Lease;
use crate::metrics::{self, Labels};
use crate::record::Records;
use crate::renewal::{KeepAlive, LostSignal, Renewing};
use crate::renewal_queue::{RenewalQueue, Ticket};
use crate::state::LockState;
use crate::turns::LocalHold;

/// What a guard holds.
pub(crate) struct Holding {
    pub(crate) handle: LockHandle,
    backend: Arc<dyn LockBackend>,
    stop: CancellationToken,
    renewing: Arc<Renewing>,
    renewals: Arc<RenewalQueue>,
    /// Where the keep-alive is parked; `None` once released.
    renewal: Mutex<Option<Ticket>>,
    /// A release is under way; if its future is dropped before the backend
    /// answered, `Drop` releases in the background instead.
    releasing: AtomicBool,
    /// Counts the grant as holding the name for its locker's waiters
    /// (`turns.rs`) until it is gone.
    local: Mutex<Option<LocalHold<Holding>>>,
    /// Counts the name as held by the task that took it (`held.rs`) until
    /// the grant is gone.
    _held: HeldMark<Holding>,
    /// When the grant was made, for the time the lock was held.
    granted_at: Instant,
}

/// Where a new grant is kept: the locker's renewal queue and held names.
pub(crate) struct Keeper<'a> {
    pub(crate) backend: &'a Arc<dyn LockBackend>,
    pub(crate) renewals: &'a Arc<RenewalQueue>,
    pub(crate) records: &'a Records<Holding>,
}

impl Holding {
    /// Keeps `lease` renewed in the background, from a third of its TTL on,
    /// and counts it held by the calling task. Needs a Tokio runtime.
    pub(crate) fn start(
        keeper: Keeper<'_>,
        lease: Lease,
        labels: Labels,
        local: Option<LocalHold<Holding>>,
    ) -> Arc<Self> {
        let (state_tx, state_rx) = watch::channel(LockState::Held);
        let lost = CancellationToken::new();
        let span = tracing::info_span!("renewal", lock = %lease.name(), token = %lease.token());
        let first_renewal = KeepAlive::first_renewal(&lease);
        let renewing = Arc::new(Renewing::new(LostSignal::new(
            state_tx,
            lost.clone(),
            labels,
        )));
        if lease.is_expired() {
            // The grant's reply came after its lease ran out: the lock may
            // already be somebody else's.
            renewing
                .signal
                .lost(&lease, "the grant arrived after its lease ran out");
        }
        let handle = LockHandle {
            name: lease.name().clone(),
            kind: lease.kind(),
            token: lease.token(),
            lease: Arc::new(Mutex::new(lease)),
            state: state_rx,
            lost,
        };
        let holding = Arc::new_cyclic(|me: &Weak<Holding>| Holding {
            _held: keeper.records.mark(&handle.name, handle.kind, me.clone()),
            handle,
            backend: keeper.backend.clone(),
            stop: CancellationToken::new(),
            renewing,
            renewals: keeper.renewals.clone(),
            renewal: Mutex::new(None),
            releasing: AtomicBool::new(false),
            local: Mutex::new(local),
            granted_at: Instant::now(),
        });
        let ticket = holding.park_keep_alive(first_renewal, span);
        *holding.ticket() = Some(ticket);
        holding
    }

    fn ticket(&self) -> std::sync::MutexGuard<'_, Option<Ticket>> {
        self.renewal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks a keep-alive of this lease in the renewal queue, to start at
    /// `due`.
    fn park_keep_alive(&self, due: Instant, span: tracing::Span) -> Ticket {
        let keep_alive = KeepAlive {
            backend: self.backend.clone(),
            lease: self.handle.lease.clone(),
            renewing: self.renewing.clone(),
            stop: self.stop.clone(),
        };
        self.renewals.park(due, keep_alive, span)
    }

    fn lost_error(&self) -> Error {
        Error::Lost {
            name: self.handle.name.to_string(),
        }
    }

    fn set_lease(&self, lease: Lease) {
        *self.handle.lease.lock().unwrap_or_else(|p| p.into_inner()) = lease;
    }

    /// See [`LockGuard::extend`](crate::LockGuard::extend).
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<Lease> {
        self.backend.capabilities().check_ttl(ttl)?;
        let renewing = self.renewing.clone();
        let _serial = renewing.serial.lock().await;
        if self.handle.is_lost() {
            return Err(self.lost_error());
        }
        let lease = self.handle.lease();
        // A shorter TTL may be applied even when its answer is lost (or
        // this future dropped): the local deadline moves to it first, so it
        // never outlasts the server's.
        let shortened = lease.renewed(ttl, Instant::now());
        if shortened.deadline() < lease.deadline() {
            self.set_lease(shortened.clone());
            self.replan_renewals(&shortened);
        }
        let span =
            tracing::info_span!("extend", lock = %lease.name(), token = %lease.token(), ttl = ?ttl);
        match self.backend.renew(&lease, ttl).instrument(span).await {
            // Lost meanwhile (the lease ran out while the request was on its
            // way): nothing renews it any more.
            // The deadline is checked before the new lease is stored: one
            // that passed while the request was on its way was already
            // reported `Lost`, which is final.
            Ok(_) if self.handle.is_lost() => {
                renewing
                    .signal
                    .lost(&lease, "the lease ran out while it was being extended");
                Err(self.lost_error())
            }
            Ok(renewed) => {
                self.set_lease(renewed.clone());
                renewing.signal.set(LockState::Held);
                self.replan_renewals(&renewed);
                Ok(renewed)
            }
            Err(e @ Error::NotHeld { .. }) => {
                renewing
                    .signal
                    .lost(&lease, "the backend found the lock gone when extending it");
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// After an extend: a keep-alive still parked is parked again for the
    /// new lease's first renewal; one already running is told.
    fn replan_renewals(&self, renewed: &Lease) {
        let mut ticket = self.ticket();
        let Some(parked) = *ticket else {
            return;
        };
        if self.renewals.cancel(parked) {
            let span =
                tracing::info_span!("renewal", lock = %renewed.name(), token = %renewed.token());
            *ticket = Some(self.park_keep_alive(KeepAlive::first_renewal(renewed), span));
        } else {
            self.renewing.renewed.notify_one();
        }
    }

    /// See [`LockGuard::is_held`](crate::LockGuard::is_held).
    pub(crate) async fn is_held(&self) -> Result<bool> {
        if self.handle.is_lost() {
            return Ok(false);
        }
        let lease = self.handle.lease();
        let span = tracing::info_span!("is_held", lock = %lease.name(), token = %lease.token());
        if self.backend.is_held(&lease).instrument(span).await? {
            // The answer counts only while the lease runs.
            Ok(!self.handle.is_lost())
        } else {
            self.renewing
                .signal
                .lost(&lease, "the backend says the lock is no longer ours");
            Ok(false)
        }
    }

    /// Stops renewing and releases the grant; see
    /// [`LockGuard::release`](crate::LockGuard::release). Called by the
    /// last guard, with nothing else left to share the grant.
    pub(crate) async fn release(self) -> Result<()> {
        self.stop_renewing();
        self.releasing.store(true, Ordering::Release);
        let lease = self.handle.lease();
        let span = tracing::info_span!("release", lock = %lease.name(), token = %lease.token());
        // The locker's next waiter holds back while this grant holds the
        // name; where requests are ordered, its attempt may follow as soon
        // as the release is on its way (see `Capabilities::ordered_requests`).
        let local = if self.backend.capabilities().ordered_requests {
            self.local.lock().unwrap_or_else(|p| p.into_inner()).take()
        } else {
            None
        };
        let released = after_first_poll(self.backend.release(&lease).instrument(span), move || {
            drop(local)
        })
        .await;
        self.releasing.store(false, Ordering::Release);
        let released = if self.handle.is_lost() {
            Err(self.lost_error())
        } else {
            released
        };
        let found_gone = matches!(released, Err(Error::Lost { .. } | Error::NotHeld { .. }));
        metrics::released(
            self.renewing.signal.labels(),
            self.granted_at.elapsed(),
            found_gone,
        );
        released
    }

    /// Stops the keep-alive; `false` if it was already stopped.
    ///
    /// A keep-alive that has started is not waited for: waiting for its task
    /// to be scheduled only to see `stop` would cost a task switch. A
    /// renewal still in flight cannot hurt: it compares owner and token like
    /// the release does, so it extends the lease before the release or finds
    /// nothing to extend after it, and a stopped keep-alive raises no lost
    /// signal.
    fn stop_renewing(&self) -> bool {
        let Some(renewal) = self.ticket().take() else {
            return false;
        };
        self.stop.cancel();
        self.renewals.cancel(renewal);
        true
    }
}

/// Runs `fut`, calling `then` once it has been polled for the first time.
async fn after_first_poll<F: Future>(fut: F, then: impl FnOnce()) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut then = Some(then);
    std::future::poll_fn(|cx| {
        let outcome = fut.as_mut().poll(cx);
        if let Some(then) = then.take() {
            then();
        }
        outcome
    })
    .await
}

impl Drop for Holding {
    fn drop(&mut self) {
        if !self.stop_renewing() && !*self.releasing.get_mut() {
            return; // released explicitly
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime: the TTL frees the lock
        };
        let backend = self.backend.clone();
        let lease = self.handle.lease.clone();
        let renewing = self.renewing.clone();
        let lost = self.handle.lost.clone();
        let held_for = self.granted_at.elapsed();
        let span = tracing::info_span!("release_on_drop", lock = %self.handle.name, token = %self.handle.token);
        runtime.spawn(
            async move {
                let lease = lease.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let released = backend.release(&lease).await;
                if let Err(e) = &released {
                    tracing::debug!(error = %e, "best-effort release of a dropped guard failed");
                }
                let found_gone =
                    lost.is_cancelled() || matches!(released, Err(Error::NotHeld { .. }));
                metrics::released(renewing.signal.labels(), held_for, found_gone);
            }
            .instrument(span),
        );
    }
}
