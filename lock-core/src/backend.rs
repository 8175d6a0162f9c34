//! What a backend author needs, in one place (opendal's `raw`): the
//! [`LockBackend`] trait and the request types its methods take, how a
//! [`Lease`] is made, the polling and wake-up helpers for waiting, the URL
//! parsers, the `async_trait` macro the trait is written with, and
//! [`acquire_lease`] for a lease with nothing to renew it. Applications use
//! [`Locker`] and its guards, and rarely need this module.

pub use crate::admitted::{Admissions, Admitted, Expecting};
pub use crate::error::BoxError;
pub use crate::handover::{Handover, Handovers, Registration, Releasing};
pub use crate::kind::Family;
pub use crate::leader::Leader;
pub use crate::lease::Lease;
pub use crate::lock_backend::{Holder, LockBackend, millis, poll_acquire};
pub use crate::options::{AcquireRequest, WaitBudget};
pub use crate::single_flight::SingleFlight;
pub use crate::stats::BackendStats;
pub use crate::token::OwnerToken;
pub use crate::url::{HostList, QueryOptions};
pub use crate::wait::{Backoff, ReleaseSignals, Retry, Waking};
pub use async_trait::async_trait;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::kind::LockKind;
use crate::locker::Locker;
use crate::options::AcquireOptions;

/// Acquires `kind` of `name` through `locker` as a bare [`Lease`], with no
/// renewal and no guard: the caller renews and releases it through
/// `backend` (the backend the locker was made over). For tools that manage
/// leases themselves; applications want the guards of [`Locker`].
///
/// Cancel-safe as the locker's acquires are: if this future is dropped while
/// a request is in flight, the request is allowed to finish (in a task of
/// its own) and whatever it was granted is released, so no lock is left
/// held by nobody.
pub async fn acquire_lease(
    locker: &Locker,
    name: impl AsRef<str>,
    kind: LockKind,
    opts: AcquireOptions,
) -> Result<Lease> {
    Ok(locker.acquire(name, kind, opts).await?.0)
}

/// Acquires `kind` of `name` through `locker` with `opts`, as a guard: what
/// [`Locker::lock_with`], [`Semaphore::acquire_with`](crate::Semaphore::acquire_with),
/// [`RwLock::read_with`](crate::RwLock::read_with) and
/// [`RwLock::write_with`](crate::RwLock::write_with) do, for tools that
/// choose the kind at run time (the `distlock` command's `--permits` and
/// `--read-write`, a test run over every kind).
pub async fn acquire_kind(
    locker: &Locker,
    name: impl AsRef<str>,
    kind: LockKind,
    opts: AcquireOptions,
) -> Result<LockGuard> {
    locker.acquire_kind(name, kind, opts).await
}
