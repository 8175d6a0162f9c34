//! The closure forms (`with_lock`, `with_permit`, a multi-lock's
//! `with_lock`, …): a section run while a lock is held, cut off at its next
//! `.await` if the lock is lost, and the lock released after it.

use std::future::Future;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::LockHandle;

/// What a section runs under: a guard, or a multi-lock's guards.
pub(crate) trait Held: Sized {
    /// What the section gets to read the lock by.
    type View;

    fn view(&self) -> Self::View;

    /// Completes when the lock (or one of the locks) is lost, with its name.
    fn lost(&self) -> impl Future<Output = String>;

    fn release(self) -> impl Future<Output = Result<()>>;
}

impl Held for LockGuard {
    type View = LockHandle;

    fn view(&self) -> LockHandle {
        self.handle()
    }

    async fn lost(&self) -> String {
        LockHandle::lost(self).await;
        self.name().to_string()
    }

    fn release(self) -> impl Future<Output = Result<()>> {
        LockGuard::release(self)
    }
}

/// Runs `section` under `held`, then releases it.
pub(crate) async fn hold_while<H, F, Fut, T>(held: H, section: F) -> Result<T>
where
    H: Held,
    F: FnOnce(H::View) -> Fut,
    Fut: Future<Output = T>,
{
    let outcome = tokio::select! {
        biased;
        name = held.lost() => Err(name),
        out = section(held.view()) => Ok(out),
    };
    match outcome {
        Ok(out) => {
            // The section finished while the lock was held; a failed
            // release must not throw its result away.
            if let Err(e) = held.release().await {
                tracing::warn!(error = %e, "release after the critical section failed");
            }
            Ok(out)
        }
        Err(name) => Err(Error::Lost { name }),
    }
}
