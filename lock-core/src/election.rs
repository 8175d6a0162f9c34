//! Leader election: `locker.election(name)`, the guard of the candidate
//! that leads, and the watch of who leads.
//!
//! An election is a lock of its own family ([`LockKind::Leader`]): the
//! leader is its holder, the term is the grant's fencing token, and the
//! value the leader proclaims is kept with the grant. So a leader renews,
//! is put at risk and is lost exactly as a lock's holder is.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::LockBackend;
use crate::capabilities::Fencing;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::LockHandle;
use crate::kind::LockKind;
use crate::leader::Leader;
use crate::locker::Locker;
use crate::name::LockName;
use crate::options::{AcquireOptions, Wait};
use crate::token::FencingToken;

impl Locker {
    /// The election `name`: candidates [`campaign`](Election::campaign)
    /// to lead it, one at a time; anybody can read who leads
    /// ([`Election::leader`]) or follow each change ([`Election::observe`]).
    ///
    /// Making the handle does no I/O and cannot fail; its calls fail with
    /// [`Error::Unsupported`] on a backend that keeps no elections (see
    /// [`Capabilities::elections`](crate::Capabilities::elections)) and
    /// with [`Error::InvalidName`] for a bad name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use lock_core::{Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let election = locker.election("scheduler");
    /// let leading = election.campaign("10.0.0.7:8080").await?;
    /// let leader = election.leader().await?.expect("somebody leads");
    /// assert_eq!((leader.value.as_str(), leader.term), ("10.0.0.7:8080", leading.term()));
    /// leading.resign().await?;
    /// assert!(election.leader().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            locker: self.clone(),
            name: name.into(),
        }
    }
}

/// An election of one [`Locker`]; see [`Locker::election`]. Cheap to clone.
#[derive(Clone)]
pub struct Election {
    locker: Locker,
    name: String,
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until this candidate leads (as long as the locker's default
    /// options allow), proclaiming `value`, and keeps the leadership
    /// renewed. Cancel-safe: a campaign dropped at any point leaves no
    /// candidacy behind.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<LeaderGuard> {
        self.campaign_with(value, self.locker.defaults()).await
    }

    /// One attempt to lead: [`Error::Busy`] if somebody leads.
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<LeaderGuard> {
        self.campaign_with(value, self.locker.defaults().wait(Wait::No))
            .await
    }

    /// Campaigns with `opts`: its TTL is the leadership's lease, its wait
    /// how long to stand by. A leadership is never reentrant.
    pub async fn campaign_with(
        &self,
        value: impl Into<String>,
        opts: AcquireOptions,
    ) -> Result<LeaderGuard> {
        let value = value.into();
        Leader::check_value(&value)?;
        let opts = opts.reentrant(false);
        let guard = self
            .locker
            .acquire_valued(&self.name, LockKind::Leader, opts, value.clone())
            .await?;
        Ok(LeaderGuard {
            guard,
            backend: self.locker.backend().clone(),
            value: Mutex::new(value),
            proclaiming: tokio::sync::Mutex::new(()),
        })
    }

    /// The leader now, or `None` while nobody leads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let name = self.checked_name()?;
        self.locker.backend().leader(&name).await
    }

    /// A watch of who leads: each [`LeaderWatch::changed`] returns the
    /// leader once it differs from the one returned last. Woken by the
    /// server where the backend can be (see
    /// [`LockBackend::leader_changed`](crate::backend::LockBackend::leader_changed)),
    /// polling every [`LeaderWatch::POLL`] otherwise.
    pub fn observe(&self) -> LeaderWatch {
        LeaderWatch {
            backend: self.locker.backend().clone(),
            name: self.name.clone(),
            seen: None,
            newest: None,
            every: LeaderWatch::POLL,
        }
    }

    fn checked_name(&self) -> Result<LockName> {
        let name = LockName::new(&self.name)?;
        self.locker.capabilities().check_kind(LockKind::Leader)?;
        Ok(name)
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

/// The leadership of one candidate, renewed in the background like a
/// [`LockGuard`]'s lock, which it derefs to: its token is the
/// [`term`](Self::term), its state goes `AtRisk` and `Lost` as a lock's
/// does, and [`resign`](Self::resign) (or a drop) hands the election to
/// the next candidate.
#[must_use = "dropping the guard resigns at once"]
pub struct LeaderGuard {
    guard: LockGuard,
    backend: Arc<dyn LockBackend>,
    value: Mutex<String>,
    /// One proclaim at a time, so that `value` is the one the store got
    /// last.
    proclaiming: tokio::sync::Mutex<()>,
}

impl LeaderGuard {
    /// The term: the fencing token of this leadership. Pass it with every
    /// write made as leader, so that the store can refuse a deposed
    /// leader's.
    pub fn term(&self) -> FencingToken {
        self.guard.token()
    }

    /// The value this leader proclaims: its campaign's, or the last one a
    /// [`proclaim`](Self::proclaim) saw the store take.
    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Proclaims `value` instead, keeping the lead and the term. Fails
    /// with [`Error::Lost`] if the leadership was lost already, and with
    /// [`Error::NotHeld`] if the backend found it gone (the guard is then
    /// lost too).
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        Leader::check_value(&value)?;
        let _one_at_a_time = self.proclaiming.lock().await;
        if self.guard.is_lost() {
            return Err(Error::Lost {
                name: self.guard.name().to_string(),
            });
        }
        match self.backend.proclaim(&self.guard.lease(), &value).await {
            Ok(()) => {
                *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value;
                Ok(())
            }
            Err(e @ Error::NotHeld { .. }) => {
                // The server says the lead is gone: let the guard find out
                // and say so to whoever watches its state.
                let _ = self.guard.is_held().await;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Asks the backend whether this candidate still leads (see
    /// [`LockGuard::is_held`]).
    pub async fn is_leading(&self) -> Result<bool> {
        self.guard.is_held().await
    }

    /// Steps down: the next candidate leads as soon as the backend hands
    /// over. Reports whether the leadership was still ours, as
    /// [`LockGuard::release`] does.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// The leadership as a plain lock guard (its value stays proclaimed).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

impl Deref for LeaderGuard {
    type Target = LockHandle;

    fn deref(&self) -> &LockHandle {
        &self.guard
    }
}

impl fmt::Debug for LeaderGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderGuard")
            .field("name", &self.guard.name())
            .field("term", &self.term())
            .field("value", &self.value())
            .field("state", &self.guard.state())
            .finish()
    }
}

/// Who leads an election, as it changes; from [`Election::observe`].
///
/// A watch that keeps up sees each leader (and each vacancy) in order; a
/// slow one skips to the latest, never back to an older one, and nothing
/// piles up while it is not asked.
pub struct LeaderWatch {
    backend: Arc<dyn LockBackend>,
    name: String,
    /// What `changed` returned last; `None` before its first call.
    seen: Option<Option<Leader>>,
    /// The greatest term returned so far: where terms are strict, a read
    /// showing a smaller one is older than what was returned (a store
    /// that answered from a state it has since left) and is not reported.
    newest: Option<FencingToken>,
    every: Duration,
}

impl LeaderWatch {
    /// How often a watch reads the leader on a backend whose server does
    /// not tell of changes, unless [`poll_every`](Self::poll_every) says.
    pub const POLL: Duration = Duration::from_millis(200);

    /// The same watch, reading every `every` where it polls.
    pub fn poll_every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(1));
        self
    }

    /// The leader `changed` returned last (`None` before the first call,
    /// or while nobody leads).
    pub fn leader(&self) -> Option<&Leader> {
        self.seen.as_ref().and_then(Option::as_ref)
    }

    /// The leader now on the first call; afterwards, waits until the
    /// leader (its term or value) differs from the one returned last and
    /// returns it, `None` for a vacancy. An error (an unreachable server)
    /// is returned as it comes; the watch can be asked again.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        let name = LockName::new(&self.name)?;
        let capabilities = self.backend.capabilities();
        capabilities.check_kind(LockKind::Leader)?;
        let strict = capabilities.fencing == Fencing::Strict;
        loop {
            let now = self.backend.leader(&name).await?;
            let older = strict
                && now
                    .as_ref()
                    .zip(self.newest)
                    .is_some_and(|(now, newest)| now.term < newest);
            let new = match &self.seen {
                None => true,
                Some(seen) => !older && !Leader::unchanged(seen.as_ref(), now.as_ref()),
            };
            if new {
                if let Some(leader) = &now {
                    self.newest = self.newest.max(Some(leader.term));
                }
                self.seen = Some(now.clone());
                return Ok(now);
            }
            self.backend
                .leader_changed(&name, now.as_ref(), self.every)
                .await?;
        }
    }
}

impl fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("name", &self.name)
            .field("leader", &self.leader())
            .finish()
    }
}
