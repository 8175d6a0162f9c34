//! A held lock: the guard that renews it and the signal that says when it is
//! no longer safe to act under it.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::held::HeldMark;
use crate::kind::LockKind;
use crate::lease::Lease;
use crate::metrics::{self, Labels};
use crate::name::LockName;
use crate::renewal::{KeepAlive, LostSignal, Renewing};
use crate::renewal_queue::{RenewalQueue, Ticket};
use crate::state::LockState;
use crate::token::FencingToken;
use crate::turns::LocalHold;

/// A cheap, cloneable view of a held lock for the code running under it: its
/// name, fencing token, lease and lost signal.
#[derive(Clone)]
pub struct LockHandle {
    name: LockName,
    kind: LockKind,
    token: FencingToken,
    lease: Arc<Mutex<Lease>>,
    state: watch::Receiver<LockState>,
    lost: CancellationToken,
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
        self.lease
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_expired()
    }

    /// The state now: `Lost` from the lease's deadline on, even before the
    /// keep-alive task has run to say so (a busy or paused runtime).
    pub fn state(&self) -> LockState {
        let state = *self.state.borrow();
        if state != LockState::Lost && self.expired() {
            return LockState::Lost;
        }
        state
    }

    /// Whether the lock has been lost (or its lease has run out).
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || self.expired()
    }

    /// Completes when the lock is lost (at once if it already is).
    pub async fn lost(&self) {
        self.lost.cancelled().await;
    }

    /// A token cancelled when the lock is lost, to hand to code that already
    /// takes a `CancellationToken`.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// A receiver that sees every change of state (`Held ⇄ AtRisk → Lost`),
    /// as the keep-alive task publishes it.
    pub fn watch(&self) -> watch::Receiver<LockState> {
        self.state.clone()
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

/// A held lock, kept alive by a background task that renews the lease at about
/// a third of its TTL (started only when that first renewal is due, so a lock
/// held briefly costs no task).
///
/// Release it with [`LockGuard::release`], which reports whether the lock was
/// still ours. Dropping the guard never blocks: it stops the renewals and, if a
/// Tokio runtime is running, releases the lock in the background; otherwise
/// the lock frees itself when its TTL runs out.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    handle: LockHandle,
    backend: Arc<dyn LockBackend>,
    stop: CancellationToken,
    renewing: Arc<Renewing>,
    renewals: Arc<RenewalQueue>,
    /// Where the keep-alive is parked; `None` once the guard is released.
    renewal: Option<Ticket>,
    /// A [`LockGuard::release`] is under way; if its future is dropped before
    /// the backend answered, `Drop` releases in the background instead.
    releasing: bool,
    /// Counts this guard as holding the name for its locker's waiters
    /// (`turns.rs`) until the guard is gone.
    local: Option<LocalHold>,
    /// Counts the name as held by the task that took it (`held.rs`) until
    /// the guard is gone.
    held: Option<HeldMark>,
    /// When the guard was made, for the time the lock was held.
    granted_at: Instant,
}

impl LockGuard {
    /// Keeps `lease` renewed in the background, from a third of its TTL on.
    /// Needs a Tokio runtime.
    pub(crate) fn start(
        backend: Arc<dyn LockBackend>,
        lease: Lease,
        renewals: &Arc<RenewalQueue>,
        labels: Labels,
    ) -> Self {
        let (state_tx, state_rx) = watch::channel(LockState::Held);
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
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
        let shared = Arc::new(Mutex::new(lease.clone()));
        let handle = LockHandle {
            name: lease.name().clone(),
            kind: lease.kind(),
            token: lease.token(),
            lease: shared,
            state: state_rx,
            lost,
        };
        let mut guard = Self {
            handle,
            backend,
            stop,
            renewing,
            renewals: renewals.clone(),
            renewal: None,
            releasing: false,
            local: None,
            held: None,
            granted_at: Instant::now(),
        };
        guard.renewal = Some(guard.park_keep_alive(first_renewal, span));
        guard
    }

    /// Parks a keep-alive of this guard's lease in the renewal queue, to
    /// start at `due`.
    fn park_keep_alive(&self, due: Instant, span: tracing::Span) -> Ticket {
        let keep_alive = KeepAlive {
            backend: self.backend.clone(),
            lease: self.handle.lease.clone(),
            renewing: self.renewing.clone(),
            stop: self.stop.clone(),
        };
        self.renewals.park(due, keep_alive, span)
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.handle.name()
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> FencingToken {
        self.handle.token()
    }

    /// What is held: the lock, a permit, or a side of a read-write lock.
    pub fn kind(&self) -> LockKind {
        self.handle.kind()
    }

    /// The lease as last renewed.
    pub fn lease(&self) -> Lease {
        self.handle.lease()
    }

    /// The state now.
    pub fn state(&self) -> LockState {
        self.handle.state()
    }

    /// Completes when the lock is lost.
    pub async fn lost(&self) {
        self.handle.lost().await;
    }

    /// A cloneable view of this lock for the code running under it.
    pub fn handle(&self) -> LockHandle {
        self.handle.clone()
    }

    /// The same guard, counted as holding its name for its locker's waiters
    /// until it is gone.
    pub(crate) fn held_locally(mut self, hold: LocalHold) -> Self {
        self.local = Some(hold);
        self
    }

    /// The same guard, counted as held by the task that took it until it is
    /// gone.
    pub(crate) fn held_by(mut self, mark: HeldMark) -> Self {
        self.held = Some(mark);
        self
    }

    /// Renews the lease now, for `ttl` from now, once the backend has
    /// checked that the lock is still ours; the renewals that follow use
    /// `ttl` too. The fencing token does not change.
    ///
    /// Returns the lease as renewed. Where a lease lives as long as a
    /// session that all of a client's locks share (etcd, ZooKeeper), the
    /// backend keeps the session's TTL, and the returned lease's
    /// [`Lease::ttl`] says so.
    ///
    /// Fails with [`Error::InvalidTtl`] for a TTL the backend cannot keep,
    /// with [`Error::Lost`] if the lock was lost already, and with
    /// [`Error::NotHeld`] if the backend found it gone, which makes it lost.
    /// Any other failure (an unreachable backend) leaves the lease as it
    /// was, and the keep-alive goes on renewing it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let mut guard = locker.lock("import").await?;
    /// // The rest of the import may take a while: keep the lock for longer
    /// // if this process dies half-way.
    /// let lease = guard.extend(Duration::from_secs(120)).await?;
    /// assert_eq!(lease.ttl(), Duration::from_secs(120));
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&mut self, ttl: Duration) -> Result<Lease> {
        self.backend.capabilities().check_ttl(ttl)?;
        let renewing = self.renewing.clone();
        let _serial = renewing.serial.lock().await;
        if self.handle.is_lost() {
            return Err(Error::Lost {
                name: self.name().to_string(),
            });
        }
        let lease = self.lease();
        // A shorter TTL may be applied even when its answer is lost (or
        // this future dropped): the local deadline moves to it first, so it
        // never outlasts the server's.
        let shortened = lease.renewed(ttl, Instant::now());
        if shortened.deadline() < lease.deadline() {
            *self.handle.lease.lock().unwrap_or_else(|p| p.into_inner()) = shortened.clone();
            self.replan_renewals(&shortened);
        }
        let span =
            tracing::info_span!("extend", lock = %lease.name(), token = %lease.token(), ttl = ?ttl);
        match self.backend.renew(&lease, ttl).instrument(span).await {
            // Lost meanwhile (the lease ran out while the request was on its
            // way): nothing renews it any more.
            Ok(_) if self.handle.lost.is_cancelled() => Err(Error::Lost {
                name: self.name().to_string(),
            }),
            Ok(renewed) => {
                *self.handle.lease.lock().unwrap_or_else(|p| p.into_inner()) = renewed.clone();
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

    /// After [`Self::extend`]: a keep-alive still parked is parked again for
    /// the new lease's first renewal; one already running is told.
    fn replan_renewals(&mut self, renewed: &Lease) {
        let Some(ticket) = self.renewal else {
            return;
        };
        if self.renewals.cancel(ticket) {
            let span =
                tracing::info_span!("renewal", lock = %renewed.name(), token = %renewed.token());
            self.renewal = Some(self.park_keep_alive(KeepAlive::first_renewal(renewed), span));
        } else {
            self.renewing.renewed.notify_one();
        }
    }

    /// Asks the backend whether the lock is still ours: whether it still
    /// holds this grant (the same owner and fencing token, or the same
    /// queue entry) unexpired. Reads only; the lease is not extended.
    ///
    /// `Ok(false)` at once, with no request, if the lock is already lost;
    /// `Ok(false)` too if the backend says it is not ours, which makes it
    /// lost. An error (an unreachable backend) says nothing either way.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let guard = locker.lock("compaction").await?;
    /// assert!(guard.is_held().await?);
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_held(&self) -> Result<bool> {
        if self.handle.is_lost() {
            return Ok(false);
        }
        let lease = self.lease();
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

    /// Stops renewing and releases the lock.
    ///
    /// Fails with [`Error::Lost`] if the lost signal had fired, and with
    /// [`Error::NotHeld`] if the backend found the lease expired or taken
    /// over, so the caller learns that its critical section may have
    /// overlapped with another holder's. A lost lock is still released on the
    /// backend, in case the local deadline (which errs early) beat the
    /// server's.
    ///
    /// Cancel-safe: if this future is dropped before the backend answered,
    /// the release is sent again in the background, as for a dropped guard.
    pub async fn release(mut self) -> Result<()> {
        self.stop_renewing();
        self.releasing = true;
        let lease = self.lease();
        let span = tracing::info_span!("release", lock = %lease.name(), token = %lease.token());
        // The locker's next waiter holds back while this guard holds the
        // name; where requests are ordered, its attempt may follow as soon
        // as the release is on its way (see `Capabilities::ordered_requests`).
        let local = if self.backend.capabilities().ordered_requests {
            self.local.take()
        } else {
            None
        };
        let released = after_first_poll(self.backend.release(&lease).instrument(span), move || {
            drop(local)
        })
        .await;
        self.releasing = false;
        let released = if self.handle.is_lost() {
            Err(Error::Lost {
                name: lease.name().to_string(),
            })
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

    /// Stops the keep-alive; `false` if the guard was already stopped.
    ///
    /// A keep-alive that has started is not waited for: waiting for its task
    /// to be scheduled only to see `stop` would cost a task switch. A
    /// renewal still in flight cannot hurt: it compares owner and token like
    /// the release does, so it extends the lease before the release or finds
    /// nothing to extend after it, and a stopped keep-alive raises no lost
    /// signal.
    fn stop_renewing(&mut self) -> bool {
        let Some(renewal) = self.renewal.take() else {
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

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.lease())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.stop_renewing() && !self.releasing {
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
        let span =
            tracing::info_span!("release_on_drop", lock = %self.name(), token = %self.token());
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
