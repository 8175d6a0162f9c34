//! An in-process backend, for unit tests, doc tests and single-process tools.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{BackendStats, Holder, LockBackend};
use crate::capabilities::{Capabilities, Fencing};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::name::LockName;
use crate::options::{AcquireRequest, WaitBudget};
use crate::token::{FencingToken, OwnerToken};
use crate::wait::{ReleaseSignals, poll_acquire};

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
    signals: ReleaseSignals,
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
}

const CAPABILITIES: Capabilities = Capabilities::new("memory", Fencing::Strict)
    .with_server_side_wait(true)
    .with_shared_across_processes(false)
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
        poll_acquire(self, req, budget, Some(&self.inner.signals)).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let now = Instant::now();
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
        Ok(self
            .slots()
            .get(lease.name())
            .is_some_and(|slot| slot.held_by(lease.owner(), lease.token()) && slot.expires > now))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let now = Instant::now();
        let was_live = {
            let mut slots = self.slots();
            match slots.get_mut(lease.name()) {
                Some(slot) if slot.held_by(lease.owner(), lease.token()) => {
                    slot.owner = None;
                    slot.expires > now
                }
                _ => false,
            }
        };
        self.inner.signals.notify(lease.name());
        if was_live {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: lease.name().to_string(),
            })
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
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

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let now = Instant::now();
        let slots = self.slots();
        Ok(slots.get(name).and_then(|slot| {
            let owner = slot.owner.filter(|_| slot.expires > now)?;
            Some(Holder::new(
                &owner.to_hex(),
                FencingToken::new(slot.version),
                Some(slot.expires - now),
            ))
        }))
    }
}
