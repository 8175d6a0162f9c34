//! An acquisition's key until it is granted or has left: deleted now if
//! the acquire is given up, or in the background if its future is dropped
//! (or at a later keep-alive, if the server cannot be reached).

use std::sync::Arc;
use std::time::Duration;

use lock_core::Error;
use lock_core::backend::AcquireRequest;

use crate::mark::Mark;
use crate::queue::Queue;
use crate::session::Session;

/// How many sessions one attempt tries before it reports an outage.
pub(crate) const REQUEUES: usize = 3;

pub(crate) fn session_lost() -> Error {
    Error::unavailable(
        crate::NAME,
        "session leases expired as soon as they were granted",
    )
}

/// An acquisition's key until it is granted or has left. If the acquire's
/// future is dropped before either (a caller of the backend that does not
/// go through `Locker`), the keys are deleted in the background: on a session lease other locks keep alive,
/// nothing else would ever delete them.
pub(crate) struct Queued {
    queue: Queue,
    keys: Vec<String>,
    mark: Mark,
    ttl: Duration,
    pub(crate) session: Option<Arc<Session>>,
    pub(crate) armed: bool,
}

impl Queued {
    pub(crate) fn new(queue: &Queue, req: &AcquireRequest) -> Self {
        Self {
            queue: queue.clone(),
            keys: queue.layout.keys_of(req),
            mark: Mark::of(req),
            ttl: req.ttl,
            session: None,
            armed: true,
        }
    }

    /// Leaves the queue now (or, if the server cannot be reached, at the
    /// session's next keep-alive).
    pub(crate) async fn leave(&mut self) {
        if self.session.is_some()
            && let Err(e) = self
                .queue
                .sessions
                .leave_or_orphan(&self.keys, &self.mark, self.ttl)
                .await
        {
            tracing::debug!(error = %e, "could not leave the queue; the next keep-alive will");
        }
        self.armed = false;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.armed || self.session.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime: the session's lease expires with the process
        };
        let (sessions, keys, mark, ttl) = (
            self.queue.sessions.clone(),
            std::mem::take(&mut self.keys),
            self.mark.clone(),
            self.ttl,
        );
        runtime.spawn(async move {
            let _ = sessions.leave_or_orphan(&keys, &mark, ttl).await;
        });
    }
}
