//! Acquire statements whose caller stopped waiting for them.
//!
//! Giving up on a statement does not stop it: a stalled network can deliver
//! it once the stall ends, and a statement waiting for a row lock runs once
//! the lock goes. Either way it may take the row after its caller was told
//! it failed, leaving the lock held by an owner nobody has until its TTL.
//! Dropping the statement's future would not help either: sqlx then drains
//! the statement's reply before the connection is used again, but nobody
//! looks at it.
//!
//! So an [`Attempt`] that outlives its limit, or whose future is dropped, is
//! handed to a task of its own that waits for the statement's answer and
//! frees whatever it took. Until that task is done, later attempts by the
//! same owner wait ([`Orphans::settled`]): a retry that adopted the late
//! grant (acquire is idempotent for its owner) must not have it freed under
//! it, and a late statement must not land after the retry's lease was
//! released.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Backoff};
use lock_core::{Error, FencingToken, LockKind, LockName, Result};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, timeout};

use crate::driver::Driver;
use crate::signals::Signals;

/// An acquire statement: the version when taken.
pub(crate) type Statement = Pin<Box<dyn Future<Output = Result<Option<FencingToken>>> + Send>>;

/// How long an orphan waits for its statement's answer. It keeps one pooled
/// connection busy meanwhile (as sqlx would, draining the reply); past this
/// the connection is taken for dead, and a statement that still lands later
/// holds its lock until its TTL.
const ANSWER_LIMIT: Duration = Duration::from_secs(600);

/// The longest pause between attempts to undo a late grant.
const UNDO_PAUSE_CAP: Duration = Duration::from_secs(1);

/// Owners with an acquire statement still in flight in a task of its own.
#[derive(Debug, Default)]
pub(crate) struct Orphans {
    /// Each orphan's task holds the sender of its channel and drops it when
    /// done, which wakes every receiver.
    pending: Mutex<HashMap<String, Vec<watch::Receiver<()>>>>,
}

impl Orphans {
    /// Waits until no statement of `owner` is in flight any more, for at most
    /// `limit`; `false` if one still is.
    pub(crate) async fn settled(&self, owner: &str, limit: Duration) -> bool {
        let waiting = self.pending().get(owner).cloned().unwrap_or_default();
        if waiting.is_empty() {
            return true;
        }
        let all_done = async {
            for mut done in waiting {
                while done.changed().await.is_ok() {}
            }
        };
        timeout(limit, all_done).await.is_ok()
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<String, Vec<watch::Receiver<()>>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, owner: &str) -> watch::Sender<()> {
        let (done, receiver) = watch::channel(());
        self.pending()
            .entry(owner.to_owned())
            .or_default()
            .push(receiver);
        done
    }

    fn forget(&self, owner: &str, done: &watch::Sender<()>) {
        let mut pending = self.pending();
        if let Some(receivers) = pending.get_mut(owner) {
            receivers.retain(|r| !r.same_channel(&done.subscribe()));
            if receivers.is_empty() {
                pending.remove(owner);
            }
        }
    }
}

/// What undoing one acquire needs, borrowed from the backend and the request
/// while the caller waits; copied only when the statement becomes an orphan.
#[derive(Clone, Copy)]
pub(crate) struct Undo<'a> {
    pub(crate) driver: &'a Arc<dyn Driver>,
    pub(crate) orphans: &'a Arc<Orphans>,
    pub(crate) signals: &'a Arc<Signals>,
    pub(crate) req: &'a AcquireRequest,
}

/// [`Undo`], owned by an orphan's task.
struct OwnedUndo {
    driver: Arc<dyn Driver>,
    orphans: Arc<Orphans>,
    signals: Arc<Signals>,
    kind: LockKind,
    name: LockName,
    owner: String,
    ttl: Duration,
}

impl Undo<'_> {
    fn to_owned(self) -> OwnedUndo {
        OwnedUndo {
            driver: self.driver.clone(),
            orphans: self.orphans.clone(),
            signals: self.signals.clone(),
            kind: self.req.kind,
            name: self.req.name.clone(),
            owner: self.req.owner.to_hex(),
            ttl: self.req.ttl,
        }
    }
}

/// One acquire statement in its caller's future. If it is not answered
/// within its limit, or the future is dropped first, it becomes an orphan.
pub(crate) struct Attempt<'a> {
    statement: Option<Statement>,
    undo: Undo<'a>,
}

impl<'a> Attempt<'a> {
    pub(crate) fn new(statement: Statement, undo: Undo<'a>) -> Self {
        Self {
            statement: Some(statement),
            undo,
        }
    }

    /// The statement's answer, or [`Error::Timeout`] after `limit`, in which
    /// case the statement is left to finish, and undone, in a task.
    pub(crate) async fn run(mut self, limit: Duration) -> Result<Option<FencingToken>> {
        let Some(statement) = self.statement.as_mut() else {
            return Err(Error::backend("an acquire statement was run twice"));
        };
        match timeout(limit, statement).await {
            Ok(answer) => {
                self.statement = None;
                answer
            }
            // `Drop` hands the statement on.
            Err(_) => Err(Error::timeout("acquire", limit)),
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let Some(statement) = self.statement.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime to finish on: the TTL frees any grant
        };
        let undo = self.undo.to_owned();
        let done = undo.orphans.register(&undo.owner);
        runtime.spawn(async move {
            settle(statement, &undo).await;
            undo.orphans.forget(&undo.owner, &done);
        });
    }
}

/// Waits for an orphaned statement's answer and frees whatever it may have
/// taken.
async fn settle(statement: Statement, undo: &OwnedUndo) {
    tracing::debug!(lock = %undo.name, "an acquire outlived its caller; undoing it once it lands");
    match timeout(ANSWER_LIMIT, statement).await {
        // Answered, and not granted: nothing to undo.
        Ok(Ok(None)) => {}
        // Granted, failed without a clear answer, or never answered.
        Ok(Ok(Some(_)) | Err(_)) | Err(_) => free(undo).await,
    }
}

/// Frees the orphan's owner's rows of its lock, retrying until that works or
/// a grant made now would have run out anyway. Each undo statement is waited
/// for, not cut off: one that landed late could free a grant that a later
/// attempt by the same owner made after this task was done.
async fn free(undo: &OwnedUndo) {
    let give_up = Instant::now() + undo.ttl;
    let mut backoff = Backoff::with_cap(UNDO_PAUSE_CAP);
    loop {
        let statement = undo
            .driver
            .abandon_in(undo.kind, undo.name.as_str(), &undo.owner);
        let Ok(answer) = timeout(ANSWER_LIMIT, statement).await else {
            give_up_on(undo, "the undo statement was never answered");
            return;
        };
        let error = match answer {
            Ok(()) => {
                undo.signals.wake(undo.kind.family(), &undo.name);
                return;
            }
            Err(e) => e,
        };
        let nap = backoff.next_nap();
        if !error.is_retryable() || Instant::now() + nap >= give_up {
            give_up_on(undo, &error.to_string());
            return;
        }
        sleep(nap).await;
    }
}

fn give_up_on(undo: &OwnedUndo, why: &str) {
    tracing::warn!(
        lock = %undo.name,
        why,
        "could not undo an acquire that outlived its caller; its TTL will free the lock"
    );
}
