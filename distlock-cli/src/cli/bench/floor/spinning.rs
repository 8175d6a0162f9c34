//! How every floor is driven: the naive client of a raw primitive, which
//! retries at once until granted or out of time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::backend::OwnerToken;
use distlock::backend::async_trait;
use distlock::{Error, Result};

use super::primitive::Floor;
use crate::cli::bench::contender::{Contender, Held, Role, Subject, Wakeups};

/// A [`Floor`] driven the naive way: retry at once (yielding to the
/// scheduler, so the holder can run) until granted or out of time.
pub(super) struct Spinning<F> {
    floor: Arc<F>,
    ttl: Duration,
    busy: AtomicU64,
    /// Where the next permit wait starts in the slots, so that clients
    /// spread over them rather than all asking for the first.
    next_slot: AtomicU64,
}

impl<F: Floor> Spinning<F> {
    pub(super) fn new(floor: F, ttl: Duration) -> Self {
        Self {
            floor: Arc::new(floor),
            ttl,
            busy: AtomicU64::new(0),
            next_slot: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl<F: Floor> Contender for Spinning<F> {
    fn subject(&self) -> Subject {
        Subject {
            role: Role::Floor,
            name: "floor".to_owned(),
            detail: format!("{}, retried at once while held", self.floor.describe()),
        }
    }

    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        self.spin(name, self.ttl, until).await
    }

    /// The bare lock as a leadership: whoever holds the election's name
    /// leads.
    async fn campaign(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        self.spin(name, self.ttl, until).await
    }

    async fn abandoned_lead(
        &self,
        name: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<Duration>> {
        if !self.floor.leases_expire() {
            return Ok(None);
        }
        // The grant is dropped unreleased: `FloorHeld` only releases when
        // asked to.
        match self.spin(name, ttl, until).await? {
            Some(_) => Ok(Some(ttl)),
            None => Err(Error::backend(format!(
                "the floor could not take the fresh name {name} for a leader to abandon"
            ))),
        }
    }

    /// The semaphore a client of the raw primitive builds from it: one lock
    /// name per permit (`NAME.permit-I`), tried in turn from a slot that
    /// moves on with every wait, retried at once while all are held.
    async fn acquire_permit(
        &self,
        name: &str,
        permits: u32,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        let owner = OwnerToken::random();
        let permits = u64::from(permits.max(1));
        let first = self.next_slot.fetch_add(1, Ordering::Relaxed);
        loop {
            for k in 0..permits {
                let slot = format!("{name}.permit-{}", (first + k) % permits);
                if let Some(held) = self.attempt(&slot, owner, self.ttl).await? {
                    return Ok(Some(held));
                }
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            tokio::task::yield_now().await;
        }
    }

    /// What every read or write costs without sharing or exclusion: the
    /// primitive on a name of the client's own (`NAME.client-I`), which is
    /// never contended.
    async fn acquire_side(
        &self,
        name: &str,
        client: usize,
        _write: bool,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        self.spin(&format!("{name}.client-{client}"), self.ttl, until)
            .await
    }

    fn wakeups(&self) -> Wakeups {
        Wakeups {
            busy_attempts: Some(self.busy.load(Ordering::Relaxed)),
            notices: None,
        }
    }
}

impl<F: Floor> Spinning<F> {
    /// Attempts at `name` with leases of `ttl` until one is granted or
    /// `until` passes.
    async fn spin(
        &self,
        name: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<Box<dyn Held>>> {
        // One owner for the whole wait, as a client of the raw primitive
        // would pick one random value per acquisition.
        let owner = OwnerToken::random();
        loop {
            if let Some(held) = self.attempt(name, owner, ttl).await? {
                return Ok(Some(held));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            tokio::task::yield_now().await;
        }
    }

    /// One attempt at `name`; a refusal is counted as a busy attempt.
    async fn attempt(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<Box<dyn Held>>> {
        match self.floor.try_acquire(name, owner, ttl).await {
            Ok(Some(grant)) => Ok(Some(Box::new(FloorHeld {
                floor: self.floor.clone(),
                grant,
            }))),
            Ok(None) => {
                self.busy.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) if e.is_retryable() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

struct FloorHeld<F: Floor> {
    floor: Arc<F>,
    grant: F::Grant,
}

#[async_trait]
impl<F: Floor> Held for FloorHeld<F> {
    async fn release(self: Box<Self>) -> Result<()> {
        self.floor.release(&self.grant).await
    }
}
