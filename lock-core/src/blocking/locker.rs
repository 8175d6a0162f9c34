//! The blocking [`Locker`] and [`LockGuard`], and the runtime under them.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::guard::LockGuard as AsyncGuard;
use crate::handle::LockHandle;
use crate::lease::Lease;
use crate::lock_backend::{Holder, LockBackend};
use crate::options::AcquireOptions;

/// The runtime the blocking types run on: one worker thread for renewals
/// and background releases, and the callers' own threads for the rest.
pub(super) struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Self> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("distlock-blocking")
            .enable_all()
            .build()
            .map(|rt| Runtime(Some(rt)))
            .map_err(|e| Error::Backend {
                message: format!("could not start the blocking API's runtime: {e}"),
                source: Some(Box::new(e)),
            })
    }

    pub(super) fn get(&self) -> &tokio::runtime::Runtime {
        self.0
            .as_ref()
            .expect("the runtime lives as long as its owner")
    }

    pub(super) fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.get().block_on(fut)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The last owner may be dropped on a runtime's thread, where a
        // blocking shutdown would panic.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A blocking [`Locker`](crate::Locker): the same four mutex verbs and the
/// same handles, each call finished before it returns. Cheap to clone.
#[derive(Clone)]
pub struct Locker {
    pub(super) inner: crate::Locker,
    pub(super) rt: Arc<Runtime>,
}

impl Locker {
    /// A locker over `backend`, for backends made without a runtime (the
    /// in-memory one). Connected backends are made with
    /// [`Locker::from_async`], on the locker's own runtime.
    pub fn new(backend: impl LockBackend) -> Result<Self> {
        Self::from_async(|| async { Ok(crate::Locker::new(backend)) })
    }

    /// Runs `make` on the locker's own runtime, where the backend's
    /// connections will live, and wraps the locker it makes.
    ///
    /// ```no_run
    /// # async fn connect(url: &str) -> lock_core::Result<lock_core::Locker> { unimplemented!() }
    /// let locker = lock_core::blocking::Locker::from_async(|| connect("sqlite://locks.db"))?;
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    pub fn from_async<F, Fut>(make: F) -> Result<Self>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<crate::Locker>>,
    {
        let rt = Arc::new(Runtime::new()?);
        let inner = rt.block_on(make())?;
        Ok(Self { inner, rt })
    }

    /// The async locker this one drives, for code that has both.
    pub fn as_async(&self) -> &crate::Locker {
        &self.inner
    }

    /// The same locker with other default options; see
    /// [`crate::Locker::with_defaults`].
    pub fn with_defaults(mut self, defaults: AcquireOptions) -> Self {
        self.inner = self.inner.with_defaults(defaults);
        self
    }

    /// The default options.
    pub fn defaults(&self) -> AcquireOptions {
        self.inner.defaults()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    /// Who holds `name`'s mutex now, where the backend can tell.
    pub fn holder(&self, name: impl AsRef<str>) -> Result<Option<Holder>> {
        self.rt.block_on(self.inner.holder(name))
    }

    pub(super) fn guard(&self, guard: Result<AsyncGuard>) -> Result<LockGuard> {
        guard.map(|guard| LockGuard::new(guard, &self.rt))
    }

    /// Blocks until `name` is acquired with the default options.
    pub fn lock(&self, name: impl AsRef<str>) -> Result<LockGuard> {
        self.guard(self.rt.block_on(self.inner.lock(name)))
    }

    /// One attempt at `name`: [`Error::Busy`] if anybody holds it.
    pub fn try_lock(&self, name: impl AsRef<str>) -> Result<LockGuard> {
        self.guard(self.rt.block_on(self.inner.try_lock(name)))
    }

    /// Acquires `name` with `opts`.
    pub fn lock_with(&self, name: impl AsRef<str>, opts: AcquireOptions) -> Result<LockGuard> {
        self.guard(self.rt.block_on(self.inner.lock_with(name, opts)))
    }

    /// Runs `section` while holding `name`, then releases it. A section
    /// that is not async cannot be stopped half-way: it should check
    /// [`LockHandle::is_lost`] between steps. If the lock was lost by the
    /// time it returns, the result is [`Error::Lost`].
    pub fn with_lock<T>(
        &self,
        name: impl AsRef<str>,
        section: impl FnOnce(&LockHandle) -> T,
    ) -> Result<T> {
        hold_while(self.lock(name)?, section)
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Locker")
            .field("inner", &self.inner)
            .finish()
    }
}

/// Runs a section that is not async under `guard`; see [`Locker::with_lock`].
pub(super) fn hold_while<T>(guard: LockGuard, section: impl FnOnce(&LockHandle) -> T) -> Result<T> {
    let out = section(&guard);
    if guard.is_lost() {
        let name = guard.name().to_string();
        drop(guard);
        return Err(Error::Lost { name });
    }
    if let Err(e) = guard.release() {
        tracing::warn!(error = %e, "release after the critical section failed");
    }
    Ok(out)
}

/// A held lock of the blocking API; dereferences to its [`LockHandle`].
/// Dropping it releases the lock before `drop` returns (in the background
/// if it is dropped on a runtime's thread).
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    guard: Option<AsyncGuard>,
    rt: Arc<Runtime>,
}

impl LockGuard {
    fn new(guard: AsyncGuard, rt: &Arc<Runtime>) -> Self {
        Self {
            guard: Some(guard),
            rt: rt.clone(),
        }
    }

    fn inner(&self) -> &AsyncGuard {
        self.guard.as_ref().expect("taken only when the guard goes")
    }

    /// A cloneable view of this lock.
    pub fn handle(&self) -> LockHandle {
        self.inner().handle()
    }

    /// How many guards hold this grant (see [`crate::LockGuard::holds`]).
    pub fn holds(&self) -> usize {
        self.inner().holds()
    }

    /// See [`crate::LockGuard::extend`].
    pub fn extend(&self, ttl: Duration) -> Result<Lease> {
        self.rt.block_on(self.inner().extend(ttl))
    }

    /// See [`crate::LockGuard::is_held`].
    pub fn is_held(&self) -> Result<bool> {
        self.rt.block_on(self.inner().is_held())
    }

    /// See [`crate::LockGuard::release`].
    pub fn release(mut self) -> Result<()> {
        let guard = self.guard.take().expect("taken only once");
        self.rt.block_on(guard.release())
    }
}

impl Deref for LockGuard {
    type Target = LockHandle;

    fn deref(&self) -> &LockHandle {
        self.inner()
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.guard {
            Some(guard) => guard.fmt(f),
            None => f.write_str("LockGuard(released)"),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            release_on_drop(&self.rt, move || guard.release());
        }
    }
}

/// Releases what a dropped blocking guard held: before returning on a
/// thread of its own; on a runtime's thread (where blocking would panic),
/// on a thread started for it, which keeps the runtime alive until the
/// release is done even if this guard was its last owner.
pub(super) fn release_on_drop<F, Fut>(rt: &Arc<Runtime>, release: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>>,
{
    let run = |rt: &Runtime, release: F| {
        if let Err(e) = rt.block_on(release()) {
            tracing::debug!(error = %e, "release of a dropped guard failed");
        }
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return run(rt, release);
    }
    let rt = rt.clone();
    let started = std::thread::Builder::new()
        .name("distlock-release".into())
        .spawn(move || run(&rt, release));
    if let Err(e) = started {
        tracing::debug!(error = %e, "no thread for the release of a dropped guard; its TTL frees it");
    }
}
