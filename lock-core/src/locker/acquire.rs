//! The acquire every `Locker` method goes through: input checked before
//! any I/O, the name's local turn, the backend's acquire run inline in the
//! caller's future and finished in a task of its own if the caller lets go
//! (`InFlight`), and whatever a failed acquire may have left undone.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Locker;
use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::holding::Holding;
use crate::kind::LockKind;
use crate::lease::Lease;
use crate::metrics::{self, Labels, Outcome};
use crate::name::LockName;
use crate::options::{AcquireOptions, AcquireRequest, Wait, WaitBudget};
use crate::per_name::Entry;
use crate::record::Record;

impl Locker {
    /// The lease, and where the backend's server does not queue waiters,
    /// the name's local queue (see `turns.rs`), to count a guard made from
    /// the lease as holding the name.
    pub(crate) async fn acquire(
        &self,
        name: impl AsRef<str>,
        kind: LockKind,
        opts: AcquireOptions,
    ) -> Result<(Lease, Option<Arc<Entry<Record<Holding>>>>, Labels)> {
        self.acquire_request(name, kind, opts, String::new()).await
    }

    /// As `acquire`, for a candidate proclaiming `value` if it leads.
    pub(crate) async fn acquire_request(
        &self,
        name: impl AsRef<str>,
        kind: LockKind,
        opts: AcquireOptions,
        value: String,
    ) -> Result<(Lease, Option<Arc<Entry<Record<Holding>>>>, Labels)> {
        let name = LockName::new(name)?;
        let capabilities = self.backend.capabilities();
        capabilities.check_kind(kind)?;
        let exclusive = kind == LockKind::Exclusive;
        if opts.wait != Wait::No {
            self.records.check(&name, kind)?;
        }
        capabilities.check_ttl(opts.ttl)?;
        let started = Instant::now();
        let labels = Labels::new(capabilities.backend, &name, self.name_labels);
        let span = tracing::info_span!(
            "acquire",
            lock = %name,
            backend = capabilities.backend,
            ttl = ?opts.ttl,
            wait = ?opts.wait,
            kind = %kind,
            token = tracing::field::Empty,
            outcome = tracing::field::Empty,
            attempts = tracing::field::Empty,
        );
        let req = AcquireRequest::new(name, opts.ttl)
            .with_kind(kind)
            .with_value(value);
        let cancel = CancellationToken::new();
        let budget = WaitBudget::new(opts.wait, cancel.clone());
        // Waiters of one name in this locker go to the backend one at a time,
        // oldest first; on a store that writes serially, or whose requests
        // are ordered, only once any local holder lets go (see `turns.rs`).
        // The turn is held until the attempt ends. Semaphores and read-write
        // locks skip the turns: a local holder does not keep a waiter out.
        let (turn, queue) = match (capabilities.fifo || !exclusive, opts.wait) {
            (true, _) => (None, None),
            (false, Wait::No) => (None, Some(self.records.record(&req.name))),
            (false, _) => {
                let turn = match self.records.take(&req.name, &budget).await {
                    Ok(turn) => turn,
                    Err(e) => {
                        let failed = Err(e);
                        let waited = budget.has_waited();
                        metrics::acquired(&labels, Outcome::of(&failed), started.elapsed(), waited);
                        return failed;
                    }
                };
                if capabilities.serial_writes || capabilities.ordered_requests {
                    turn.after_local_holder(&budget).await;
                }
                let queue = turn.record();
                (Some(turn), Some(queue))
            }
        };
        let backend = self.backend.clone();
        let reported = labels.clone();
        let attempt = async move {
            let _turn = turn;
            let outcome = backend.acquire(&req, &budget).await;
            match &outcome {
                Ok(lease) => {
                    tracing::Span::current().record("token", lease.token().get());
                }
                Err(e) if outcome_unknown(e) => {
                    // The last request may have been applied even though
                    // its reply never came. The undo goes to a task of its
                    // own: the server that did not answer may not answer it
                    // either, and the caller must not wait a second timeout.
                    let backend = backend.clone();
                    tokio::spawn(
                        async move { undo(&*backend, &req).await }
                            .instrument(tracing::Span::current()),
                    );
                }
                Err(_) if !exclusive => {
                    // A writer that gave up must not be left marked as
                    // waiting, holding readers back. The server has just
                    // answered, and a caller that tries again next must find
                    // the mark gone, so this undo runs before returning.
                    undo(&*backend, &req).await;
                }
                Err(_) => {}
            }
            let span = tracing::Span::current();
            span.record("attempts", budget.attempts());
            // A caller that went away gets nothing, whatever came back.
            if budget.cancel_token().is_cancelled() {
                span.record("outcome", "cancelled");
            } else {
                let kind = Outcome::of(&outcome);
                span.record("outcome", kind.as_str());
                metrics::acquired(&reported, kind, started.elapsed(), budget.has_waited());
            }
            outcome
        };
        let lease = InFlight {
            attempt: Some(Box::pin(attempt.instrument(span))),
            backend: self.backend.clone(),
            cancel,
        }
        .finish()
        .await?;
        Ok((lease, queue, labels))
    }
}

/// An acquire running in its caller's future. If the caller drops it
/// mid-request, `Drop` stops the wait and moves the unfinished request into a
/// task of its own, which lets it finish and releases whatever it was
/// granted: a request in flight is never cut off half-way, and no lock is
/// left held by nobody. Running inline saves a task switch per acquire on
/// the common path.
struct InFlight {
    attempt: Option<Pin<Box<dyn Future<Output = Result<Lease>> + Send>>>,
    backend: Arc<dyn LockBackend>,
    cancel: CancellationToken,
}

impl InFlight {
    async fn finish(mut self) -> Result<Lease> {
        let outcome = std::future::poll_fn(|cx| match self.attempt.as_mut() {
            Some(attempt) => attempt.as_mut().poll(cx),
            None => Poll::Ready(Err(Error::backend(
                "an acquire was polled after it finished",
            ))),
        })
        .await;
        self.attempt = None;
        outcome
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(attempt) = self.attempt.take() else {
            return;
        };
        self.cancel.cancel();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime to finish on: the TTL frees any grant
        };
        let backend = self.backend.clone();
        runtime.spawn(async move {
            if let Ok(orphan) = attempt.await {
                tracing::debug!(
                    "acquire was cancelled while its request was in flight; releasing the grant"
                );
                let _ = backend.release(&orphan).await;
            }
        });
    }
}

/// Removes whatever a failed acquire may have left behind; its TTL frees
/// anything this cannot reach.
async fn undo(backend: &dyn LockBackend, req: &AcquireRequest) {
    if let Err(cleanup) = backend.abandon(req).await {
        tracing::debug!(error = %cleanup, "could not undo a failed acquire; its TTL will");
    }
}

/// Whether a failed acquire may have left a grant or a queue entry behind.
fn outcome_unknown(e: &Error) -> bool {
    !e.is_contention() && !e.is_invalid_input()
}
