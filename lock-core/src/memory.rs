//! An in-process backend, for unit tests, doc tests and single-process tools.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{BackendStats, Holder, Leader, LockBackend, poll_acquire};
use crate::capabilities::{Capabilities, Fencing};
use crate::error::{Error, Result};
use crate::kind::{Family, LockKind};
use crate::lease::Lease;
use crate::name::LockName;
use crate::options::{AcquireRequest, WaitBudget};
use crate::token::{FencingToken, OwnerToken};
use crate::wait::{ReleaseSignals, Waking};

/// Locks that live in this process only. Clones share the same locks, so
/// several [`Locker`](crate::Locker)s made from clones contend with each
/// other. Expiry follows Tokio's clock, so tests can pause and advance time.
///
/// Fencing tokens are strict for the life of the process.
#[derive(Clone, Debug, Default)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: Mutex<HashMap<LockName, Slot>>,
    /// Semaphores and read-write locks, by family and name.
    groups: Mutex<HashMap<(Family, LockName), Group>>,
    signals: ReleaseSignals,
    /// Told of every change of any election's leader or value.
    elections: tokio::sync::Notify,
}

/// The holders of one semaphore or read-write lock, and the writers waiting
/// for it (so that arriving readers hold back). Tokens count grants of the
/// group, so every holder's differs and later grants get larger ones.
#[derive(Debug, Default)]
struct Group {
    granted: u64,
    holders: Vec<Member>,
    writers_waiting: Vec<(OwnerToken, Instant)>,
}

#[derive(Debug)]
struct Member {
    owner: OwnerToken,
    token: u64,
    kind: LockKind,
    expires: Instant,
    /// What a leader proclaims.
    value: String,
}

impl Group {
    fn prune(&mut self, now: Instant) {
        self.holders.retain(|m| m.expires > now);
        self.writers_waiting.retain(|(_, until)| *until > now);
    }

    fn live(&mut self, owner: OwnerToken, token: FencingToken) -> Option<&mut Member> {
        self.holders
            .iter_mut()
            .find(|m| m.owner == owner && m.token == token.get())
    }

    /// Admits `req` if its kind's rule allows, returning its token; a
    /// refused writer is remembered as waiting for
    /// [`AcquireRequest::writer_mark`] from now.
    fn admit(&mut self, req: &AcquireRequest, now: Instant) -> Option<u64> {
        self.prune(now);
        if let Some(m) = self.holders.iter_mut().find(|m| m.owner == req.owner) {
            m.expires = now + req.ttl;
            return Some(m.token);
        }
        let others_wait = self.writers_waiting.iter().any(|(o, _)| *o != req.owner);
        let free = match req.kind {
            LockKind::Permit { permits } => self.holders.len() < permits as usize,
            LockKind::Read => !others_wait && self.holders.iter().all(|m| m.kind == LockKind::Read),
            _ => self.holders.is_empty(),
        };
        // A writer's own mark goes either way: renewed if it is refused
        // again, dropped if it gets in.
        self.writers_waiting.retain(|(o, _)| *o != req.owner);
        if !free {
            if req.kind == LockKind::Write {
                self.writers_waiting
                    .push((req.owner, now + req.writer_mark()));
            }
            return None;
        }
        self.granted += 1;
        self.holders.push(Member {
            owner: req.owner,
            token: self.granted,
            kind: req.kind,
            expires: now + req.ttl,
            value: req.value.clone(),
        });
        Some(self.granted)
    }
}

/// One name's row: like the SQL backend's, it stays after release so the
/// version keeps counting up.
#[derive(Debug)]
struct Slot {
    owner: Option<OwnerToken>,
    version: u64,
    expires: Instant,
}

impl Slot {
    fn held_by(&self, owner: OwnerToken, token: FencingToken) -> bool {
        self.owner == Some(owner) && self.version == token.get()
    }
}

impl MemoryBackend {
    /// An empty set of locks.
    pub fn new() -> Self {
        Self::default()
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, Slot>> {
        self.inner.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<(Family, LockName), Group>> {
        self.inner.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the group of `lease`'s family and name, if there is one.
    fn with_group<T>(&self, lease: &Lease, f: impl FnOnce(&mut Group) -> T) -> Option<T> {
        let key = (lease.kind().family(), lease.name().clone());
        self.groups().get_mut(&key).map(f)
    }

    fn try_join(&self, req: &AcquireRequest) -> Option<Lease> {
        let now = Instant::now();
        let key = (req.kind.family(), req.name.clone());
        let token = self.groups().entry(key).or_default().admit(req, now)?;
        if req.kind == LockKind::Leader {
            self.inner.elections.notify_waiters();
        }
        Some(Lease::granted(req, FencingToken::new(token), now))
    }
}

const CAPABILITIES: Capabilities = Capabilities::new("memory", Fencing::Strict)
    .with_server_side_wait(true)
    .with_shared_across_processes(false)
    .with_semaphores(true)
    .with_read_write(true)
    .with_elections(true)
    .with_ttl_range(Duration::from_millis(1), Capabilities::DEFAULT_MAX_TTL);

#[async_trait]
impl LockBackend for MemoryBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// `wakeups`: release notices sent to waiters so far.
    fn stats(&self) -> BackendStats {
        self.inner.signals.stats()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        if req.kind != LockKind::Exclusive {
            return Ok(self.try_join(req));
        }
        let now = Instant::now();
        let mut slots = self.slots();
        let slot = slots.entry(req.name.clone()).or_insert(Slot {
            owner: None,
            version: 0,
            expires: now,
        });
        let live = slot.owner.is_some() && slot.expires > now;
        if live && slot.owner != Some(req.owner) {
            return Ok(None);
        }
        if !live {
            slot.version += 1;
            slot.owner = Some(req.owner);
        }
        slot.expires = now + req.ttl;
        let token = FencingToken::new(slot.version);
        Ok(Some(Lease::new(
            req.name.clone(),
            req.owner,
            token,
            req.ttl,
            now,
        )))
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(self, req, budget, Waking::signalled(&self.inner.signals)).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let now = Instant::now();
        if lease.kind() != LockKind::Exclusive {
            let renewed = self.with_group(lease, |g| {
                g.prune(now);
                let m = g.live(lease.owner(), lease.token())?;
                m.expires = now + ttl;
                Some(lease.renewed(ttl, now))
            });
            return renewed
                .flatten()
                .ok_or_else(|| Error::not_held(lease.name()));
        }
        let mut slots = self.slots();
        match slots.get_mut(lease.name()) {
            Some(slot) if slot.held_by(lease.owner(), lease.token()) && slot.expires > now => {
                slot.expires = now + ttl;
                Ok(lease.renewed(ttl, now))
            }
            _ => Err(Error::NotHeld {
                name: lease.name().to_string(),
            }),
        }
    }

    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let now = Instant::now();
        if lease.kind() != LockKind::Exclusive {
            let held = self.with_group(lease, |g| {
                g.prune(now);
                g.live(lease.owner(), lease.token()).is_some()
            });
            return Ok(held == Some(true));
        }
        Ok(self
            .slots()
            .get(lease.name())
            .is_some_and(|slot| slot.held_by(lease.owner(), lease.token()) && slot.expires > now))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let now = Instant::now();
        let was_live = if lease.kind() != LockKind::Exclusive {
            self.with_group(lease, |g| {
                g.prune(now);
                let before = g.holders.len();
                g.holders
                    .retain(|m| !(m.owner == lease.owner() && m.token == lease.token().get()));
                g.holders.len() < before
            }) == Some(true)
        } else {
            let mut slots = self.slots();
            match slots.get_mut(lease.name()) {
                Some(slot) if slot.held_by(lease.owner(), lease.token()) => {
                    slot.owner = None;
                    slot.expires > now
                }
                _ => false,
            }
        };
        match lease.kind().family() {
            Family::ReadWrite => self.inner.signals.notify_all(lease.name()),
            Family::Election => {
                self.inner.elections.notify_waiters();
                self.inner.signals.notify(lease.name());
            }
            _ => self.inner.signals.notify(lease.name()),
        }
        if was_live {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: lease.name().to_string(),
            })
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        if req.kind != LockKind::Exclusive {
            let key = (req.kind.family(), req.name.clone());
            if let Some(g) = self.groups().get_mut(&key) {
                g.holders.retain(|m| m.owner != req.owner);
                g.writers_waiting.retain(|(o, _)| *o != req.owner);
            }
            if req.kind == LockKind::Leader {
                self.inner.elections.notify_waiters();
            }
            self.inner.signals.notify_all(&req.name);
            return Ok(());
        }
        let mut slots = self.slots();
        if let Some(slot) = slots
            .get_mut(&req.name)
            .filter(|s| s.owner == Some(req.owner))
        {
            slot.owner = None;
            drop(slots);
            self.inner.signals.notify(&req.name);
        }
        Ok(())
    }

    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        let now = Instant::now();
        let proclaimed = self.with_group(lease, |g| {
            g.prune(now);
            let m = g.live(lease.owner(), lease.token())?;
            m.value = value.to_owned();
            Some(())
        });
        proclaimed
            .flatten()
            .ok_or_else(|| Error::not_held(lease.name()))?;
        self.inner.elections.notify_waiters();
        Ok(())
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        let now = Instant::now();
        let groups = self.groups();
        let group = groups.get(&(Family::Election, name.clone()));
        Ok(group
            .into_iter()
            .flat_map(|g| &g.holders)
            .find(|m| m.expires > now)
            .map(|m| {
                Leader::new(
                    &m.owner.to_hex(),
                    m.value.clone(),
                    FencingToken::new(m.token),
                    Some(m.expires - now),
                )
            }))
    }

    async fn leader_changed(
        &self,
        _name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        // A leader whose lease runs out changes nothing in the map: wake
        // when it does.
        let within = seen
            .and_then(|l| l.expires_in)
            .map_or(within, |left| within.min(left + Duration::from_millis(1)));
        let _ = tokio::time::timeout(within, self.inner.elections.notified()).await;
        Ok(())
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        let now = Instant::now();
        if kind.family() != Family::Mutex {
            let groups = self.groups();
            let holders = groups.get(&(kind.family(), name.clone()));
            return Ok(holders
                .into_iter()
                .flat_map(|g| &g.holders)
                .filter(|m| m.expires > now)
                .map(|m| {
                    Holder::new(
                        &m.owner.to_hex(),
                        FencingToken::new(m.token),
                        Some(m.expires - now),
                    )
                    .of_kind(m.kind)
                })
                .collect());
        }
        let slots = self.slots();
        Ok(slots
            .get(name)
            .and_then(|slot| {
                let owner = slot.owner.filter(|_| slot.expires > now)?;
                Some(Holder::new(
                    &owner.to_hex(),
                    FencingToken::new(slot.version),
                    Some(slot.expires - now),
                ))
            })
            .into_iter()
            .collect())
    }
}
