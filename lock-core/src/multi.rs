//! Several mutexes taken together, all or none: `locker.multi_lock(names)`.
//!
//! Every caller takes its names in one global order (sorted), so two
//! callers whose sets overlap never hold one name each while waiting for
//! the other's: the one that gets the lowest shared name first gets them
//! all first.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::time::Instant;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::handle::LockHandle;
use crate::locker::Locker;
use crate::options::{AcquireOptions, Wait};
use crate::section::{Held, hold_while};
use crate::state::LockState;
use crate::token::FencingToken;

impl Locker {
    /// The mutexes `names` as one lock, taken all or none. A name given
    /// twice counts once. Making the handle does no I/O and cannot fail.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let transfer = locker.multi_lock(["account-7", "account-3"]);
    /// let both = transfer.lock().await?;
    /// assert_eq!(both.guards().len(), 2);
    /// assert!(locker.try_lock("account-3").await.unwrap_err().is_busy());
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        names.sort();
        names.dedup();
        MultiLock {
            locker: self.clone(),
            names,
        }
    }
}

/// Several mutexes of one [`Locker`] taken together; see
/// [`Locker::multi_lock`]. Cheap to clone.
#[derive(Clone)]
pub struct MultiLock {
    locker: Locker,
    /// Sorted and without repeats: the order every caller takes them in.
    names: Vec<String>,
}

impl MultiLock {
    /// The names, in the order they are taken.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Acquires every name with the locker's default options.
    pub async fn lock(&self) -> Result<MultiGuard> {
        self.lock_with(self.locker.defaults()).await
    }

    /// One attempt at each name in turn: [`Error::Busy`](crate::Error::Busy) if any is held,
    /// with the ones already taken released.
    pub async fn try_lock(&self) -> Result<MultiGuard> {
        self.lock_with(self.locker.defaults().wait(Wait::No)).await
    }

    /// Acquires every name with `opts`; a [`Wait::For`] bounds the whole
    /// acquire, not each name. On any failure the names already taken are
    /// released before the error is returned; if the future is dropped,
    /// they are released in the background, as dropped guards are.
    pub async fn lock_with(&self, opts: AcquireOptions) -> Result<MultiGuard> {
        let until = match opts.wait {
            Wait::For(d) => Instant::now().checked_add(d),
            _ => None,
        };
        let mut guards = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let wait = match (opts.wait, until) {
                (Wait::For(_), Some(until)) => {
                    Wait::For(until.saturating_duration_since(Instant::now()))
                }
                (wait, _) => wait,
            };
            match self.locker.lock_with(name, opts.wait(wait)).await {
                Ok(guard) => guards.push(guard),
                Err(e) => {
                    release_all(guards).await.ok();
                    return Err(e);
                }
            }
        }
        Ok(MultiGuard { guards })
    }

    /// Runs `section` while holding every name, then releases them. If any
    /// is lost while `section` runs, `section` is dropped at its next
    /// `.await` and the result is [`Error::Lost`](crate::Error::Lost). The section gets each
    /// name's [`LockHandle`], in the order of [`MultiLock::names`].
    pub async fn with_lock<F, Fut, T>(&self, section: F) -> Result<T>
    where
        F: FnOnce(Vec<LockHandle>) -> Fut,
        Fut: Future<Output = T>,
    {
        hold_while(self.lock().await?, section).await
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names)
            .finish()
    }
}

/// Every name of a [`MultiLock`], held: one guard per name, each renewed
/// and carrying its own fencing token. Dropping it drops every guard.
#[must_use = "dropping the guard releases the locks at once"]
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// One guard per name, in the order of [`MultiLock::names`].
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Each name's fencing token, in the same order.
    pub fn tokens(&self) -> Vec<FencingToken> {
        self.guards.iter().map(|g| g.token()).collect()
    }

    /// The worst state of any name: `Lost` if any is lost, `AtRisk` if any
    /// is at risk.
    pub fn state(&self) -> LockState {
        self.guards
            .iter()
            .map(|g| g.state())
            .max()
            .unwrap_or(LockState::Held)
    }

    /// Whether any name has been lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(|g| g.is_lost())
    }

    /// Completes when any name is lost, with its name.
    pub async fn lost(&self) -> String {
        let mut waits: Vec<_> = self
            .guards
            .iter()
            .map(|g| {
                Box::pin(async move {
                    g.lost().await;
                    g.name().to_string()
                })
            })
            .collect();
        std::future::poll_fn(|cx| {
            for wait in &mut waits {
                if let Poll::Ready(name) = Pin::new(wait).poll(cx) {
                    return Poll::Ready(name);
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Releases every name, all at once; the first error (in name order)
    /// after all were tried, as [`LockGuard::release`] reports them.
    pub async fn release(self) -> Result<()> {
        release_all(self.guards).await
    }
}

impl Held for MultiGuard {
    type View = Vec<LockHandle>;

    fn view(&self) -> Vec<LockHandle> {
        self.guards.iter().map(LockGuard::handle).collect()
    }

    fn lost(&self) -> impl Future<Output = String> {
        MultiGuard::lost(self)
    }

    fn release(self) -> impl Future<Output = Result<()>> {
        MultiGuard::release(self)
    }
}

/// Releases `guards` concurrently; the first error, after all were tried.
async fn release_all(guards: Vec<LockGuard>) -> Result<()> {
    let mut releases: Vec<_> = guards
        .into_iter()
        .map(|g| Some(Box::pin(g.release())))
        .collect();
    let mut outcomes: Vec<Option<Result<()>>> = releases.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (release, outcome) in releases.iter_mut().zip(&mut outcomes) {
            if let Some(fut) = release {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(done) => {
                        *outcome = Some(done);
                        *release = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outcomes
        .into_iter()
        .flatten()
        .collect::<Result<Vec<()>>>()
        .map(|_| ())
}
