//! What a successful acquire returns.

use std::time::Duration;

use tokio::time::Instant;

use crate::kind::LockKind;
use crate::name::LockName;
use crate::options::AcquireRequest;
use crate::token::{FencingToken, OwnerToken};

/// One grant of a lock, as plain data.
///
/// The deadline is on the local monotonic clock and counted from the moment
/// the request that granted (or last renewed) the lease was *sent*, minus a
/// drift allowance (and any early expiry the backend declares:
/// [`Lease::with_early_expiry`]), so it errs on the early side: the server
/// cannot have freed the lock before [`Lease::deadline`] unless its clock runs
/// faster than ours by more than the allowance.
#[derive(Clone, Debug)]
pub struct Lease {
    name: LockName,
    owner: OwnerToken,
    token: FencingToken,
    ttl: Duration,
    sent_at: Instant,
    deadline: Instant,
    version: Option<u64>,
    kind: LockKind,
    slot: Option<u32>,
    early: Duration,
}

impl Lease {
    /// The share of the TTL assumed lost to clock-rate differences between
    /// this host and the server (the Redlock paper's drift factor).
    pub const DRIFT_FACTOR: f64 = 0.01;
    /// A fixed allowance added to the drift for timer granularity.
    pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

    /// A lease granted by a request sent at `sent_at` asking for `ttl`.
    pub fn new(
        name: LockName,
        owner: OwnerToken,
        token: FencingToken,
        ttl: Duration,
        sent_at: Instant,
    ) -> Self {
        Self {
            deadline: Self::deadline_for(ttl, sent_at, Duration::ZERO),
            name,
            owner,
            token,
            ttl,
            sent_at,
            version: None,
            kind: LockKind::Exclusive,
            slot: None,
            early: Duration::ZERO,
        }
    }

    /// The lease `req` asked for, granted with `token` by a request sent at
    /// `sent_at`: its name, owner, TTL and [kind](Self::kind) are the
    /// request's.
    pub fn granted(req: &AcquireRequest, token: FencingToken, sent_at: Instant) -> Self {
        Self {
            kind: req.kind,
            ..Self::new(req.name.clone(), req.owner, token, req.ttl, sent_at)
        }
    }

    /// The same lease, carrying `version`: the backend's version of the
    /// lock's record as this grant or renewal left it (memcache: the item's
    /// CAS unique), so that the next renewal or the release can write on it
    /// without reading it first. Only ever a hint: a backend that uses it
    /// must still refuse to write when it no longer matches, because a
    /// renewal cut on our side after the server applied it leaves it stale.
    pub fn with_version(mut self, version: u64) -> Self {
        self.version = Some(version);
        self
    }

    /// The same lease, held through the backend's record number `slot`:
    /// for a backend that keeps a semaphore as one record per permit
    /// (memcache), which of them this grant took, so that renewals and the
    /// release go straight to it. Kept by [`renewed`](Self::renewed).
    pub fn with_slot(mut self, slot: u32) -> Self {
        self.slot = Some(slot);
        self
    }

    /// The record this grant holds, where the backend keeps one per permit
    /// (see [`with_slot`](Self::with_slot)).
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// The same lease, taken to end `early` sooner than its TTL says: for a
    /// server that may let a record expire up to that long before the TTL
    /// it was given has passed (memcache: its clock moves in whole seconds,
    /// and can lag by two). Kept by [`renewed`](Self::renewed), so that a
    /// renewal — and a guard's provisional deadline for an `extend` — ends
    /// as early. The TTL and [`sent_at`](Self::sent_at) stay as they were:
    /// renewals are still planned from the send.
    pub fn with_early_expiry(mut self, early: Duration) -> Self {
        self.early = early;
        self.deadline = Self::deadline_for(self.ttl, self.sent_at, early);
        self
    }

    /// The same grant, extended by a renewal sent at `sent_at`. It keeps the
    /// [`version`](Self::version); a backend that keeps one sets the
    /// renewal's with [`with_version`](Self::with_version).
    pub fn renewed(&self, ttl: Duration, sent_at: Instant) -> Self {
        Self {
            deadline: Self::deadline_for(ttl, sent_at, self.early),
            ttl,
            sent_at,
            ..self.clone()
        }
    }

    fn deadline_for(ttl: Duration, sent_at: Instant, early: Duration) -> Instant {
        let drift = ttl.mul_f64(Self::DRIFT_FACTOR) + Self::DRIFT_FLOOR;
        sent_at + ttl.saturating_sub(drift + early)
    }

    /// What was granted: the lock, a permit, or a side of a read-write lock.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lock this lease is for.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The owner token compared by the server on renew and release.
    pub fn owner(&self) -> OwnerToken {
        self.owner
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The TTL asked for when the lease was last granted or renewed.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When the request that granted or last renewed the lease was sent: the
    /// instant its TTL is counted from.
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }

    /// The backend's version of the lock's record, if it keeps one (see
    /// [`with_version`](Self::with_version)).
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// When the lease must be taken as expired, on the local monotonic clock.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left before the deadline; zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Whether the deadline has passed.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_conservative() {
        let sent = Instant::now();
        let name = LockName::new("a").unwrap();
        let lease = Lease::new(
            name,
            OwnerToken::random(),
            FencingToken::new(1),
            Duration::from_secs(10),
            sent,
        );
        assert_eq!(lease.deadline(), sent + Duration::from_millis(9_898));
        let tiny = lease.renewed(Duration::from_millis(1), sent);
        assert_eq!(
            tiny.deadline(),
            sent,
            "the deadline never precedes the send time"
        );
        assert_eq!(tiny.token(), lease.token());
    }

    #[test]
    fn an_early_expiry_is_kept_by_renewals() {
        let sent = Instant::now();
        let name = LockName::new("a").unwrap();
        let ttl = Duration::from_secs(10);
        let lease = Lease::new(name, OwnerToken::random(), FencingToken::new(1), ttl, sent)
            .with_early_expiry(Duration::from_secs(2));
        assert_eq!(lease.deadline(), sent + Duration::from_millis(7_898));
        assert_eq!(lease.sent_at(), sent, "renewals are planned from the send");
        let later = sent + Duration::from_secs(1);
        assert_eq!(
            lease.renewed(ttl, later).deadline(),
            later + Duration::from_millis(7_898)
        );
        assert_eq!(
            lease.renewed(Duration::from_secs(1), later).deadline(),
            later,
            "never before the send"
        );
    }
}
