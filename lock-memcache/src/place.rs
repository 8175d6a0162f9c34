//! Where a grant lives: its item's key, the fence counter its tokens come
//! from, what the item holds, and the lease a grant there gives.

use std::time::Duration;

use lock_core::FencingToken;
use lock_core::backend::{AcquireRequest, Lease};
use tokio::time::Instant;

use crate::ballot::Ballot;
use crate::meta::Item;

/// How far memcached's clock can lag the real time, so how much sooner
/// than its TTL an item can expire: every lease is taken to end that much
/// early.
///
/// memcached's clock (`current_time`) is a count of whole seconds that its
/// main thread reads from the monotonic clock in a timer handler, re-armed
/// for one second after each run: ticks come every second *plus* the
/// handler's delay, at an instant that slides across the second. Just
/// before a tick the clock is behind by the time since the last tick (up
/// to a second and that delay) plus the fraction of a second the last tick
/// came after the whole second it read (up to a second); the tick that
/// follows moves it by two. An item stored with `T<n>` then expires when
/// the clock reaches its read value plus `n`: as little as two seconds
/// (and the delay, which the lease's drift allowance covers) before `n`
/// seconds are up. Renewals set their expiry on the same clock, so they
/// end as early (`Lease::renewed` keeps it).
pub(crate) const CLOCK_LAG: Duration = Duration::from_secs(2);

/// The item a grant lives in, and the fence counter its grants draw from:
/// a mutex's, one slot of a semaphore's (`semaphore.rs`), or an
/// election's (`election.rs`).
pub(crate) struct Place {
    pub(crate) key: String,
    pub(crate) fence: String,
    pub(crate) slot: Option<u32>,
    /// An election's item holds the term and the proclaimed value after
    /// the owner (`ballot.rs`); the others' hold the owner alone.
    pub(crate) election: bool,
}

impl Place {
    /// What an add of `req` here writes: its owner token, and for an
    /// election the value it proclaims, the term to follow once drawn.
    pub(crate) fn record(&self, req: &AcquireRequest) -> String {
        let owner = req.owner.to_hex();
        if !self.election {
            return owner;
        }
        Ballot {
            owner: &owner,
            term: None,
            value: &req.value,
        }
        .write()
    }

    /// What our item here holds, as far as our last write of it tells:
    /// the owner alone; `None` for an election's, whose value a proclaim
    /// may have changed since.
    pub(crate) fn kept(&self, owner: &str) -> Option<String> {
        (!self.election).then(|| owner.to_owned())
    }

    /// Whether `item` is `lease`'s grant: it holds `lease`'s owner, and an
    /// election's the term too.
    pub(crate) fn holds(&self, item: &Item, lease: &Lease) -> bool {
        let owner = lease.owner().to_hex();
        if !self.election {
            return item.value == owner;
        }
        let ballot = Ballot::read(&item.value);
        ballot.owner == owner && ballot.term == Some(lease.token().get())
    }

    /// The lease `req` gets for a grant here, sent at `sent` and holding
    /// the item at `cas`: ending [`CLOCK_LAG`] early, as every lease does.
    pub(crate) fn lease(
        &self,
        req: &AcquireRequest,
        token: FencingToken,
        cas: u64,
        sent: Instant,
    ) -> Lease {
        let lease = Lease::granted(req, token, sent)
            .with_early_expiry(CLOCK_LAG)
            .with_version(cas);
        match self.slot {
            Some(slot) => lease.with_slot(slot),
            None => lease,
        }
    }
}
