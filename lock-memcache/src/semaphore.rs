//! Semaphores: `N` permits as `N` slots, each one mutex on its own key.
//!
//! A permit is the mutex's protocol on slot `i`'s key (`add` to take it,
//! compare-and-set to renew, compare-and-delete to release): one item holds
//! one owner, so the `N` slots hold at most `N` owners. What is particular
//! to the semaphore is here: which slot an attempt takes, and an owner's
//! slots found again after a lost reply.

use std::time::Duration;

use lock_core::backend::{AcquireRequest, Holder, Lease};
use lock_core::{LockKind, LockName, Result};
use tokio::time::Instant;

use crate::backend::{MemcacheBackend, permits};
use crate::meta::Item;
use crate::place::Place;

impl MemcacheBackend {
    /// Every holder of a semaphore: the live item of each slot. A slot's
    /// token is not kept beside it (its counter is the semaphore's), so
    /// holders come without one.
    pub(crate) async fn group_holders(
        &self,
        name: &LockName,
        kind: LockKind,
    ) -> Result<Vec<Holder>> {
        let Some(permits) = permits(kind)? else {
            return Ok(Vec::new());
        };
        let (_, items) = self.read_slots(name, permits).await?;
        Ok(items
            .into_iter()
            .flatten()
            .map(|item| {
                let left = item.ttl.map(Duration::from_secs);
                Holder::without_token(&item.value, left).of_kind(kind)
            })
            .collect())
    }

    /// One attempt at a permit of `req.name`'s semaphore of `permits`.
    ///
    /// The add goes first, at a slot of the owner's own (so that
    /// contenders spread over the slots instead of all racing for slot 0),
    /// with the token drawn and every slot read right behind it, in one
    /// round trip: where that slot is free, as the floor's bare add finds
    /// it, the permit costs no more. The read serves the rest:
    /// - a slot other than the one just added holding our owner is an
    ///   earlier attempt's add that applied and whose reply was lost: that
    ///   grant is taken again, and the item just added deleted, so the
    ///   owner never keeps two;
    /// - a refused add that found our own item takes that grant again;
    /// - otherwise the slots the read found free are added one at a time
    ///   until one add is granted or all are refused. The adds are not
    ///   written together: each one that applies takes a permit, and an
    ///   attempt wants one.
    ///
    /// A full semaphore costs the one round trip, and burns a token.
    pub(crate) async fn try_permit(
        &self,
        req: &AcquireRequest,
        permits: u32,
        sent: Instant,
    ) -> Result<Option<Lease>> {
        let places: Vec<Place> = (0..permits).map(|i| self.slot(&req.name, i)).collect();
        let keys: Vec<&str> = places.iter().map(|p| p.key.as_str()).collect();
        let start = u32::try_from(req.owner.to_u128() % u128::from(permits)).unwrap_or(0);
        let first = &places[start as usize];
        let (added, token, items) = self.add_reading(req, first, &keys).await?;
        let owner = req.owner.to_hex();
        let added = added.applied();
        let earlier = ours(&places, &items, &owner)
            .find(|(place, _)| added.is_none() || place.slot != first.slot);
        if let Some((place, item)) = earlier {
            if let Some(cas) = added {
                self.client.delete_if(&first.key, cas).await?;
            }
            return self.take_again(req, place, item.cas, sent).await;
        }
        if let Some(cas) = added {
            return Ok(Some(first.lease(req, token, cas, sent)));
        }
        for slot in (1..permits).map(|i| (start + i) % permits) {
            let slot = slot as usize;
            if items[slot].is_some() {
                continue;
            }
            if let Some(lease) = self.add_at(req, &places[slot], sent).await? {
                return Ok(Some(lease));
            }
        }
        Ok(None)
    }

    /// Deletes every slot of the semaphore that holds `req`'s owner: an
    /// attempt whose reply was lost may have added any of them. Only items
    /// whose value is our owner are deleted, each on the CAS read with it.
    pub(crate) async fn abandon_permits(&self, req: &AcquireRequest, permits: u32) -> Result<()> {
        let (places, items) = self.read_slots(&req.name, permits).await?;
        let owner = req.owner.to_hex();
        for (place, item) in ours(&places, &items, &owner) {
            self.delete_if_owner(&place.key, &owner, Some(item.cas))
                .await?;
        }
        Ok(())
    }

    /// The semaphore's slots and their items, read in one round trip that
    /// leaves the items' places in memcached's LRU as they were.
    async fn read_slots(
        &self,
        name: &LockName,
        permits: u32,
    ) -> Result<(Vec<Place>, Vec<Option<Item>>)> {
        let places: Vec<Place> = (0..permits).map(|i| self.slot(name, i)).collect();
        let keys: Vec<&str> = places.iter().map(|p| p.key.as_str()).collect();
        let items = self.client.peek_all(&keys).await?;
        Ok((places, items))
    }
}

/// The slots whose item holds `owner`.
fn ours<'a>(
    places: &'a [Place],
    items: &'a [Option<Item>],
    owner: &'a str,
) -> impl Iterator<Item = (&'a Place, &'a Item)> {
    places
        .iter()
        .zip(items)
        .filter_map(move |(place, item)| Some((place, item.as_ref().filter(|i| i.value == owner)?)))
}
