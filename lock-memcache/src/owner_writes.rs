//! Writes that apply to an item only while it holds a given owner: every
//! renewal, release and abandon, the re-grant after a lost reply, and an
//! election's term and proclaimed value.

use std::time::Duration;

use lock_core::{Error, Result};

use crate::backend::{MemcacheBackend, exptime};
use crate::ballot::owner_of;
use crate::meta::{Item, Write};

/// How often a conditional write on an owner's item is tried while the item
/// stays the owner's but its CAS moves between the read and the write.
const OWNER_WRITE_ATTEMPTS: usize = 3;

impl MemcacheBackend {
    /// Sets `key`'s expiry to `ttl` from now if `owner` holds it, writing
    /// `value` (see [`write_if_owner`](Self::write_if_owner) for `known`).
    /// Without a `value` the item is read and written back as it is: an
    /// election's item holds a value that a proclaim may have changed
    /// since our last write of it. The item's new CAS if extended.
    pub(crate) async fn extend_if_owner(
        &self,
        key: &str,
        owner: &str,
        known: Option<u64>,
        value: Option<&str>,
        ttl: Duration,
    ) -> Result<Option<u64>> {
        let exptime = exptime(ttl);
        let known = known.filter(|_| value.is_some());
        self.write_if_owner(key, owner, known, "compare-and-set", |cas, read| {
            let value = value
                .or(read.map(|item| item.value.as_str()))
                .unwrap_or(owner)
                .to_owned();
            async move { self.client.set_if(key, &value, exptime, cas).await }
        })
        .await
    }

    /// Deletes `key` only if `owner` holds it (see
    /// [`write_if_owner`](Self::write_if_owner) for `known`). `true` if
    /// deleted.
    pub(crate) async fn delete_if_owner(
        &self,
        key: &str,
        owner: &str,
        known: Option<u64>,
    ) -> Result<bool> {
        let deleted = self
            .write_if_owner(key, owner, known, "compare-and-delete", |cas, _| {
                self.client.delete_if(key, cas)
            })
            .await?;
        Ok(deleted.is_some())
    }

    /// Applies `write` on `key` if `owner` holds it, and returns the item's
    /// new CAS (`0` after a delete); `None` if the key is gone or holds
    /// another owner's token. `write` gets the CAS to write on and the item
    /// as read, if it was.
    ///
    /// With `known`, the CAS of our own last write of the item, the write is
    /// tried on it first: it applies only if nobody wrote the item since,
    /// so the item is still the one that holds our token, and a missing item
    /// is not ours. Any other answer sends it to the read below: a write of
    /// ours cut on our side (a renewal whose future was dropped, or timed
    /// out) may have landed and moved the CAS, which says nothing about who
    /// holds the lock.
    ///
    /// Otherwise `key` is read and, if it holds `owner`'s token, `write` is
    /// applied on the CAS just read. The CAS can still move between the read
    /// and the write for the same reason, so the read is repeated and the
    /// write retried, a bounded number of times. Each write applies only to
    /// the very item a read saw holding our token, so a retry can never
    /// touch another owner's lock.
    pub(crate) async fn write_if_owner<F, W>(
        &self,
        key: &str,
        owner: &str,
        known: Option<u64>,
        what: &'static str,
        write: F,
    ) -> Result<Option<u64>>
    where
        F: Fn(u64, Option<&Item>) -> W,
        W: Future<Output = Result<Write>>,
    {
        if let Some(cas) = known {
            match write(cas, None).await? {
                Write::Applied(cas) => return Ok(Some(cas)),
                Write::Missing => return Ok(None),
                Write::Changed | Write::NotStored => {}
            }
        }
        for attempt in 0..=OWNER_WRITE_ATTEMPTS {
            let item = match self.client.get(key).await? {
                Some(item) if owner_of(&item.value) == owner => item,
                _ => return Ok(None),
            };
            if attempt == OWNER_WRITE_ATTEMPTS {
                break;
            }
            if let Write::Applied(cas) = write(item.cas, Some(&item)).await? {
                return Ok(Some(cas));
            }
        }
        // Still ours, but written under us every time: not a loss, and
        // worth trying again later.
        Err(Error::unavailable(
            crate::NAME,
            format!(
                "{key}: the item stayed this owner's but changed before each of \
                 {OWNER_WRITE_ATTEMPTS} tries of its {what}"
            ),
        ))
    }
}
