//! [`MemcacheBackend`]: `add` to acquire, compare-and-set to renew,
//! compare-and-delete to release.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::backend::{
    AcquireRequest, Holder, Lease, LockBackend, ReleaseSignals, WaitBudget, async_trait,
    poll_acquire,
};
use lock_core::{Capabilities, Error, Fencing, FencingToken, LockName, OwnerToken, Result};
use tokio::time::Instant;

use crate::config::MemcacheConfig;
use crate::meta::{MetaClient, Write};

/// memcached counts expiry in whole seconds and ticks its clock once a
/// second, so an item stored with `T<n>` may expire up to a second early.
const GRANULARITY: Duration = Duration::from_secs(1);

/// How often a conditional write on an owner's item is tried while the item
/// stays the owner's but its CAS moves between the read and the write.
const OWNER_WRITE_ATTEMPTS: usize = 3;

/// The shortest TTL that leaves a lease after the granularity is taken off.
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// Past 30 days memcached reads an expiry as an absolute Unix time; well
/// below that, the default maximum of a day applies.
const CAPABILITIES: Capabilities = Capabilities::new(crate::NAME, Fencing::BestEffort)
    .with_ttl_range(MIN_TTL, Capabilities::DEFAULT_MAX_TTL);

/// A lock backend on one memcached (see the crate docs).
#[derive(Debug)]
pub struct MemcacheBackend {
    client: MetaClient,
    prefix: String,
    signals: ReleaseSignals,
}

impl MemcacheBackend {
    /// Reaches the memcached a `memcache://host:port[?options]` URL names.
    /// Connections are made on first use; this checks the server answers.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(MemcacheConfig::parse(url)?).await
    }

    /// Reaches the memcached `config` names; see [`connect`](Self::connect).
    pub async fn connect_with(config: MemcacheConfig) -> Result<Self> {
        let MemcacheConfig {
            addr,
            prefix,
            timeout,
            connect_timeout,
            pool_size,
        } = config;
        let backend = Self {
            client: MetaClient::new(addr, pool_size, timeout, connect_timeout),
            prefix,
            signals: ReleaseSignals::new(),
        };
        backend
            .client
            .get(&format!("{}distlock-ping", backend.prefix))
            .await?;
        Ok(backend)
    }

    /// The meta-protocol client, for tests that replay an interleaving
    /// (feature `raw`).
    #[cfg(feature = "raw")]
    pub fn client(&self) -> &MetaClient {
        &self.client
    }

    /// The key holding `name`'s owner token (feature `raw`).
    #[cfg(feature = "raw")]
    pub fn lock_key(&self, name: &LockName) -> String {
        self.key(name)
    }

    /// The key holding `name`'s owner token.
    fn key(&self, name: &LockName) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The key of `name`'s fence counter (`#` is not allowed in lock names).
    fn fence_key(&self, name: &LockName) -> String {
        format!("{}{name}#fence", self.prefix)
    }

    /// The next fencing token: the counter, seeded from the clock whenever
    /// it is missing (see [`seed`]).
    async fn next_token(&self, name: &LockName) -> Result<FencingToken> {
        Ok(FencingToken::new(
            self.client
                .increment_or_seed(&self.fence_key(name), seed())
                .await?,
        ))
    }

    /// Sets `key`'s expiry to `ttl` from now if `owner` holds it: on
    /// `known`, the CAS our last write of it left, if that is still the
    /// item's, else on the CAS a read finds. The item's new CAS if extended.
    async fn extend_if_owner(
        &self,
        key: &str,
        owner: &str,
        known: Option<u64>,
        ttl: Duration,
    ) -> Result<Option<u64>> {
        let exptime = exptime(ttl);
        self.write_if_owner(key, owner, known, "compare-and-set", |cas| {
            self.client.set_if(key, owner, exptime, cas)
        })
        .await
    }

    /// Applies `write` on `key` if `owner` holds it, and returns the item's
    /// new CAS (`0` after a delete); `None` if the key is gone or holds
    /// another owner's token.
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
    async fn write_if_owner<F, W>(
        &self,
        key: &str,
        owner: &str,
        known: Option<u64>,
        what: &'static str,
        write: F,
    ) -> Result<Option<u64>>
    where
        F: Fn(u64) -> W,
        W: Future<Output = Result<Write>>,
    {
        if let Some(cas) = known {
            match write(cas).await? {
                Write::Applied(cas) => return Ok(Some(cas)),
                Write::Missing => return Ok(None),
                Write::Changed | Write::NotStored => {}
            }
        }
        for attempt in 0..=OWNER_WRITE_ATTEMPTS {
            let cas = match self.client.get(key).await? {
                Some(item) if item.value == owner => item.cas,
                _ => return Ok(None),
            };
            if attempt == OWNER_WRITE_ATTEMPTS {
                break;
            }
            if let Write::Applied(cas) = write(cas).await? {
                return Ok(Some(cas));
            }
        }
        // Still ours, but written under us every time: not a loss, and
        // worth trying again later.
        Err(Error::Unavailable {
            backend: crate::NAME,
            message: format!(
                "{key}: the item stayed this owner's but changed before each of \
                 {OWNER_WRITE_ATTEMPTS} tries of its {what}"
            ),
            source: None,
        })
    }

    async fn current_token(&self, name: &LockName) -> Result<FencingToken> {
        let item = self.client.get(&self.fence_key(name)).await?;
        Ok(FencingToken::new(
            item.and_then(|i| i.value.trim().parse().ok()).unwrap_or(0),
        ))
    }

    /// Deletes `name` only if `owner` holds it (see
    /// [`write_if_owner`](Self::write_if_owner) for `known`). `true` if
    /// deleted.
    async fn delete_if_owner(
        &self,
        name: &LockName,
        owner: OwnerToken,
        known: Option<u64>,
    ) -> Result<bool> {
        let key = self.key(name);
        let deleted = self
            .write_if_owner(&key, &owner.to_hex(), known, "compare-and-delete", |cas| {
                self.client.delete_if(&key, cas)
            })
            .await?;
        Ok(deleted.is_some())
    }
}

/// The CAS of our last write of `lease`'s item, while the lease is in force.
///
/// memcached's CAS values come from one counter per server run, so while the
/// item is there a CAS names one write of it, ours. After the deadline the
/// item may have expired and the key been taken again, and memcached counts
/// CAS values from 1 again after a restart: an old CAS could then name
/// another owner's item, so a late release reads the owner first.
fn known_cas(lease: &Lease) -> Option<u64> {
    lease.version().filter(|_| !lease.is_expired())
}

/// The value a missing fence counter is created with: the clock in
/// microseconds, so the counter never goes back while clocks do not.
fn seed() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_micros()).unwrap_or(u64::MAX)
}

/// Whole seconds, rounded up.
fn exptime(ttl: Duration) -> u64 {
    ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)
}

/// A lease for a grant sent at `sent`, a granularity tick early.
fn lease(
    name: &LockName,
    owner: OwnerToken,
    token: FencingToken,
    ttl: Duration,
    sent: Instant,
) -> Lease {
    Lease::new(
        name.clone(),
        owner,
        token,
        ttl,
        sent.checked_sub(GRANULARITY).unwrap_or(sent),
    )
}

#[async_trait]
impl LockBackend for MemcacheBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let sent = Instant::now();
        let owner = req.owner.to_hex();
        let key = self.key(&req.name);
        // The counter is incremented right behind the add on the same
        // connection, so after the grant and before anybody else can be
        // granted: tokens follow grants. (Ahead of the add, another
        // connection's grant could come in between and draw a larger token
        // than ours.) A refused add burns a token; the read tells whether
        // the refusal found our own item.
        let (added, token, item) = self
            .client
            .add_then_increment(
                &key,
                &owner,
                exptime(req.ttl),
                &self.fence_key(&req.name),
                seed(),
            )
            .await?;
        if let Write::Applied(cas) = added {
            let token = FencingToken::new(token);
            return Ok(Some(
                lease(&req.name, req.owner, token, req.ttl, sent).with_version(cas),
            ));
        }
        // If the key is ours already, an earlier attempt's add was applied
        // and its reply (or its token's) lost. Its expiry runs from that
        // attempt, and it may never have drawn a token, so the counter may
        // still hold the previous holder's: renew the expiry from this send,
        // and draw a token after that, as a fresh grant does.
        let Some(item) = item.filter(|i| i.value == owner) else {
            return Ok(None);
        };
        let Some(cas) = self
            .extend_if_owner(&key, &owner, Some(item.cas), req.ttl)
            .await?
        else {
            return Ok(None);
        };
        let token = self.next_token(&req.name).await?;
        Ok(Some(
            lease(&req.name, req.owner, token, req.ttl, sent).with_version(cas),
        ))
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(self, req, budget, Some(&self.signals)).await
    }

    async fn renew(&self, lease_now: &Lease, ttl: Duration) -> Result<Lease> {
        // The lease counts from before the first request, even when a later
        // try's write is the one that applied: every write is sent after
        // this instant, so the lease never outlasts the expiry it set.
        let sent = Instant::now();
        let key = self.key(lease_now.name());
        let owner = lease_now.owner().to_hex();
        match self
            .extend_if_owner(&key, &owner, known_cas(lease_now), ttl)
            .await?
        {
            Some(cas) => Ok(lease(
                lease_now.name(),
                lease_now.owner(),
                lease_now.token(),
                ttl,
                sent,
            )
            .with_version(cas)),
            None => Err(Error::not_held(lease_now.name())),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let deleted = self
            .delete_if_owner(lease.name(), lease.owner(), known_cas(lease))
            .await?;
        self.signals.notify(lease.name());
        if deleted {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.delete_if_owner(&req.name, req.owner, None).await?;
        self.signals.notify(&req.name);
        Ok(())
    }

    /// The lock's item is there, unexpired, with our owner as its value.
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let item = self.client.get(&self.key(lease.name())).await?;
        Ok(item.is_some_and(|item| item.value == lease.owner().to_hex()))
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let Some(item) = self.client.get(&self.key(name)).await? else {
            return Ok(None);
        };
        Ok(Some(Holder::new(
            &item.value,
            self.current_token(name).await?,
            item.ttl.map(Duration::from_secs),
        )))
    }
}
