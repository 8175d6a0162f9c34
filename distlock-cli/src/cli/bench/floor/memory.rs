//! The floor of `memory://`: a mutex-guarded map, insert to take a name and
//! remove to give it back.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use distlock::backend::OwnerToken;
use distlock::backend::async_trait;
use distlock::{Error, Result};

use super::primitive::Floor;

/// Names mapped to their owner and expiry: the least a TTL lock in one
/// process can do.
#[derive(Default)]
pub(super) struct MemoryFloor {
    slots: Mutex<HashMap<String, (OwnerToken, Instant)>>,
}

impl MemoryFloor {
    fn slots(&self) -> MutexGuard<'_, HashMap<String, (OwnerToken, Instant)>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A name taken by an owner.
pub(super) struct MemoryGrant {
    name: String,
    owner: OwnerToken,
}

#[async_trait]
impl Floor for MemoryFloor {
    type Grant = MemoryGrant;

    fn describe(&self) -> String {
        "std::sync::Mutex<HashMap> insert-if-free-or-expired and remove-if-owner".to_owned()
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<MemoryGrant>> {
        let now = Instant::now();
        match self.slots().entry(name.to_owned()) {
            Entry::Occupied(held) if held.get().1 > now => return Ok(None),
            Entry::Occupied(mut expired) => {
                expired.insert((owner, now + ttl));
            }
            Entry::Vacant(free) => {
                free.insert((owner, now + ttl));
            }
        }
        Ok(Some(MemoryGrant {
            name: name.to_owned(),
            owner,
        }))
    }

    async fn release(&self, grant: &MemoryGrant) -> Result<()> {
        let mut slots = self.slots();
        match slots.get(&grant.name) {
            Some((owner, _)) if *owner == grant.owner => {
                slots.remove(&grant.name);
                Ok(())
            }
            _ => Err(Error::not_held(grant.name.clone())),
        }
    }
}
