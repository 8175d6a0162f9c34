//! The run's last step: once every worker has stopped, one process takes
//! the whole lock — every permit of a semaphore at once, the write side of
//! a read-write lock, the mutex — to show that what crashed, paused or cut
//! off holders took came back (no deadlock). Each acquire waits up to the
//! plan's wait, longer than any lease a worker could have left.

use lock_core::backend::acquire_kind;
use lock_core::{AcquireOptions, LockGuard, LockKind, Locker, Wait};

use crate::history::{Event, History, error_kind, instant_ns};
use crate::plan::WorkerPlan;

/// Takes `plan.lock` whole, logs each grant and a `probe` line with how
/// much it got, and releases what it got.
pub async fn probe(locker: &Locker, plan: &WorkerPlan) -> std::io::Result<()> {
    let history = History::open(&plan.history)?;
    let (kind, wanted) = plan.lock.whole();
    let opts = AcquireOptions::with_ttl(plan.ttl).wait(Wait::For(plan.wait));
    // One after another, so that each grant's line follows its own
    // invoke: the checker pairs them by process.
    let mut guards = Vec::new();
    for _ in 0..wanted {
        if let Some(guard) = take(locker, &history, &plan.name, kind, opts).await? {
            guards.push(guard);
        }
    }
    history.log(Event::Probe {
        got: guards.len() as u32,
        wanted,
    })?;
    for guard in guards {
        history.log(Event::Release {
            deadline_ns: instant_ns(guard.lease().deadline().into()),
        })?;
        history.log(match guard.release().await {
            Ok(()) => Event::Released,
            Err(e) => Event::ReleaseFailed(error_kind(&e).to_owned()),
        })?;
    }
    Ok(())
}

async fn take(
    locker: &Locker,
    history: &History,
    name: &str,
    kind: LockKind,
    opts: AcquireOptions,
) -> std::io::Result<Option<LockGuard>> {
    history.log(Event::Invoke)?;
    match acquire_kind(locker, name, kind, opts).await {
        Ok(guard) => {
            history.log(Event::Grant {
                token: guard.token().get(),
                deadline_ns: instant_ns(guard.lease().deadline().into()),
                kind: guard.kind(),
            })?;
            Ok(Some(guard))
        }
        Err(e) => {
            history.log(Event::Fail(error_kind(&e).to_owned()))?;
            Ok(None)
        }
    }
}
