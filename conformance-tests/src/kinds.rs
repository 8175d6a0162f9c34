//! Acquiring any kind of lock by its `LockKind`, for cases that run over
//! every kind: the library's `backend::acquire_kind` and
//! `backend::acquire_lease` as methods of the locker.

use lock_core::backend::{acquire_kind, acquire_lease};
use lock_core::{AcquireOptions, Lease, LockGuard, LockKind, Locker, Result};

/// `kind` of a name, through a [`Locker`].
pub trait Kinds {
    /// `kind` of `name` as a guard.
    fn lock_kind(
        &self,
        name: impl AsRef<str> + Send,
        kind: LockKind,
        opts: AcquireOptions,
    ) -> impl Future<Output = Result<LockGuard>> + Send;

    /// `kind` of `name` as a bare lease, renewed by nobody.
    fn lease_kind(
        &self,
        name: impl AsRef<str> + Send,
        kind: LockKind,
        opts: AcquireOptions,
    ) -> impl Future<Output = Result<Lease>> + Send;
}

impl Kinds for Locker {
    async fn lock_kind(
        &self,
        name: impl AsRef<str> + Send,
        kind: LockKind,
        opts: AcquireOptions,
    ) -> Result<LockGuard> {
        acquire_kind(self, name, kind, opts).await
    }

    async fn lease_kind(
        &self,
        name: impl AsRef<str> + Send,
        kind: LockKind,
        opts: AcquireOptions,
    ) -> Result<Lease> {
        acquire_lease(self, name, kind, opts).await
    }
}

/// A `try_*` answer as an option: `None` for [`Error::Busy`](lock_core::Error::Busy),
/// for tests that poll until a lock is free or taken.
pub fn busy_is_none<T>(answer: Result<T>) -> Result<Option<T>> {
    match answer {
        Ok(got) => Ok(Some(got)),
        Err(e) if e.is_busy() => Ok(None),
        Err(e) => Err(e),
    }
}
