//! The closure forms (`with_lock`, `with_permit`, …): a section run while a
//! lock is held, cut off at its next `.await` if the lock is lost.

use std::future::Future;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::LockHandle;

/// Runs `section` under `guard`, then releases it.
pub(crate) async fn hold_while<F, Fut, T>(guard: LockGuard, section: F) -> Result<T>
where
    F: FnOnce(LockHandle) -> Fut,
    Fut: Future<Output = T>,
{
    let handle = guard.handle();
    let outcome = tokio::select! {
        biased;
        () = handle.lost() => None,
        out = section(handle.clone()) => Some(out),
    };
    match outcome {
        Some(out) => {
            // The section finished while the lock was held; a failed
            // release must not throw its result away.
            if let Err(e) = guard.release().await {
                tracing::warn!(lock = %handle.name(), error = %e, "release after the critical section failed");
            }
            Ok(out)
        }
        None => Err(Error::Lost {
            name: handle.name().to_string(),
        }),
    }
}
