//! The application-facing API over any backend: the mutex's verbs here,
//! the other families' on their handles (`semaphore.rs`, `rwlock.rs`,
//! `multi.rs`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::backend::{BackendStats, Holder, LockBackend};
use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::LockHandle;
use crate::holding::{Holding, Keeper};
use crate::kind::LockKind;
use crate::name::LockName;
use crate::options::{AcquireOptions, Wait};
use crate::record::Records;
use crate::renewal_queue::RenewalQueue;
use crate::section::hold_while;

mod acquire;

/// Acquires locks from one backend: validates input, keeps leases renewed
/// through [`LockGuard`], and makes every acquire cancel-safe.
///
/// The mutex's verbs are here: [`lock`](Locker::lock),
/// [`try_lock`](Locker::try_lock), [`lock_with`](Locker::lock_with) options
/// and [`with_lock`](Locker::with_lock) a closure. A semaphore, a
/// read-write lock and a set of locks taken together are handles with the
/// same four verbs each: [`Locker::semaphore`], [`Locker::rwlock`],
/// [`Locker::multi_lock`].
///
/// Cheap to clone; clones share the backend and the task that starts
/// renewals. Like the backend's connections, that task lives on the Tokio
/// runtime where the locker first hands out a guard.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use lock_core::{Locker, MemoryBackend};
///
/// let locker = Locker::new(MemoryBackend::new());
/// let guard = locker.lock("nightly-report").await?;
/// println!("fencing token {}", guard.token());
/// assert!(locker.try_lock("nightly-report").await.unwrap_err().is_busy());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Locker {
    backend: Arc<dyn LockBackend>,
    defaults: AcquireOptions,
    renewals: Arc<RenewalQueue>,
    /// What this locker and its clones keep about each name in use.
    records: Arc<Records<Holding>>,
    /// Whether metrics carry the lock name as a label.
    name_labels: bool,
}

impl Locker {
    /// A locker over `backend` with [`AcquireOptions::default`].
    pub fn new(backend: impl LockBackend) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    /// A locker over a backend that is already shared.
    pub fn from_arc(backend: Arc<dyn LockBackend>) -> Self {
        Self {
            backend,
            defaults: AcquireOptions::default(),
            renewals: Arc::default(),
            records: Arc::default(),
            name_labels: false,
        }
    }

    /// The same locker with other default options: what every acquire
    /// without options of its own (`lock`, `try_lock`, `with_lock`, and
    /// the handles' verbs) uses. `try_*` keep their one attempt.
    pub fn with_defaults(mut self, defaults: AcquireOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// The same locker with the lock name as a `lock` label on its metrics
    /// (with the `metrics` feature), besides the `backend` label. Off by
    /// default: every name is a series of its own in the metrics store, so
    /// turn it on only where names are few.
    pub fn label_metrics_by_name(mut self, on: bool) -> Self {
        self.name_labels = on;
        self
    }

    /// The default options.
    pub fn defaults(&self) -> AcquireOptions {
        self.defaults
    }

    /// The backend's own counters (see [`LockBackend::stats`]).
    pub fn stats(&self) -> BackendStats {
        self.backend.stats()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    /// Acquires `name` with the default options (by default waiting as long
    /// as it takes) and keeps it renewed.
    pub async fn lock(&self, name: impl AsRef<str>) -> Result<LockGuard> {
        self.lock_with(name, self.defaults).await
    }

    /// One attempt at `name` with the default TTL: [`Error::Busy`] if
    /// anybody holds it (the same as `lock_with` with [`Wait::No`]).
    pub async fn try_lock(&self, name: impl AsRef<str>) -> Result<LockGuard> {
        self.lock_with(name, self.defaults.wait(Wait::No)).await
    }

    /// Acquires `name` with `opts` and keeps it renewed.
    ///
    /// If the calling task already holds `name` through a guard of this
    /// locker (or a clone of it), a reentrant ask
    /// ([`AcquireOptions::reentrant`]) gets a second guard of that grant;
    /// any other that would wait fails at once with
    /// [`Error::AlreadyHeld`], since the wait would wait on itself. Other
    /// tasks wait for the name as usual; futures joined in one task are
    /// one task. Without a wait ([`Wait::No`]) the answer is
    /// [`Error::Busy`], as for any holder. The same holds for a write asked
    /// for by a task holding either side of the read-write lock, and a read
    /// by a task holding its write.
    pub async fn lock_with(
        &self,
        name: impl AsRef<str>,
        opts: AcquireOptions,
    ) -> Result<LockGuard> {
        self.acquire_kind(name, LockKind::Exclusive, opts).await
    }

    /// Runs `section` while holding `name`, then releases it, with the
    /// default options (for others, call it on
    /// `locker.clone().with_defaults(opts)`).
    ///
    /// If the lock is lost while `section` runs, `section` is dropped at its
    /// next `.await` and the result is [`Error::Lost`]. The section gets a
    /// [`LockHandle`] for the fencing token.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let token = locker.with_lock("migrate", |held| async move { held.token() }).await?;
    /// assert!(token.get() > 0);
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, name: impl AsRef<str>, section: F) -> Result<T>
    where
        F: FnOnce(LockHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        hold_while(self.lock(name).await?, section).await
    }

    /// Who holds `name`'s mutex now, where the backend can tell.
    pub async fn holder(&self, name: impl AsRef<str>) -> Result<Option<Holder>> {
        Ok(self.holders(name, LockKind::Exclusive).await?.pop())
    }

    /// Every holder of `kind`'s lock of `name`, for the handles.
    pub(crate) async fn holders(
        &self,
        name: impl AsRef<str>,
        kind: LockKind,
    ) -> Result<Vec<Holder>> {
        let name = LockName::new(name)?;
        self.capabilities().check_kind(kind)?;
        self.backend.holders(&name, kind).await
    }

    /// `kind` of `name` with `opts`, as a guard: a share of the calling
    /// task's own grant where `opts` is reentrant and it holds one, a new
    /// grant otherwise.
    pub(crate) async fn acquire_kind(
        &self,
        name: impl AsRef<str>,
        kind: LockKind,
        opts: AcquireOptions,
    ) -> Result<LockGuard> {
        if opts.reentrant {
            let name = LockName::new(name.as_ref())?;
            if let Some(holding) = self.records.shared(&name, kind) {
                if holding.handle.is_lost() {
                    return Err(Error::Lost {
                        name: name.to_string(),
                    });
                }
                return Ok(LockGuard::new(holding));
            }
        }
        self.acquire_valued(name, kind, opts, String::new()).await
    }

    /// A new grant of `kind` of `name`, proclaiming `value` if it is a
    /// leadership, as a guard.
    pub(crate) async fn acquire_valued(
        &self,
        name: impl AsRef<str>,
        kind: LockKind,
        opts: AcquireOptions,
        value: String,
    ) -> Result<LockGuard> {
        let (lease, queue, labels) = self.acquire_request(name, kind, opts, value).await?;
        let keeper = Keeper {
            backend: &self.backend,
            renewals: &self.renewals,
            records: &self.records,
        };
        let local = queue.map(crate::turns::hold);
        Ok(LockGuard::new(Holding::start(keeper, lease, labels, local)))
    }

    /// The backend: to renew and release a lease from
    /// [`acquire_lease`](crate::backend::acquire_lease), or to reach a
    /// backend's own methods.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("defaults", &self.defaults)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    #[tokio::test]
    async fn a_name_has_one_record_while_in_use_and_none_after() {
        let locker = Locker::new(MemoryBackend::new());
        let records = locker.records.clone();
        let guard = locker.lock("a").await.unwrap();
        let permit = locker.semaphore("a", 2).acquire().await.unwrap();
        let other = locker.lock("b").await.unwrap();
        assert_eq!(
            records.0.len(),
            2,
            "one record per name, whatever the kinds"
        );
        let again = locker
            .lock_with("a", AcquireOptions::default().wait(Wait::Forever))
            .await
            .unwrap_err();
        assert!(matches!(again, Error::AlreadyHeld { .. }), "{again}");
        let second = locker.semaphore("a", 2).acquire().await;
        assert!(second.is_ok(), "a second permit does not wait on the first");
        drop(second);
        guard.release().await.unwrap();
        assert!(
            locker.lock("a").await.is_ok_and(|g| g.token().get() > 0),
            "the mutex's hold went with its guard; the permit's stays apart"
        );
        permit.release().await.unwrap();
        other.release().await.unwrap();
        // The last guard's drop finishes its release in the background.
        for _ in 0..100 {
            if records.0.len() == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{} records left after every guard went", records.0.len());
    }
}
