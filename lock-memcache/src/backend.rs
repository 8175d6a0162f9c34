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
use crate::meta::MetaClient;

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
    /// it is missing (evicted, or the server restarted), so it never goes
    /// back while clocks do not.
    async fn next_token(&self, name: &LockName) -> Result<FencingToken> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let seed = u64::try_from(now.as_micros()).unwrap_or(u64::MAX);
        Ok(FencingToken::new(
            self.client
                .increment_or_seed(&self.fence_key(name), seed)
                .await?,
        ))
    }

    /// Sets `key`'s expiry to `ttl` from now if `owner` holds it. `true` if
    /// extended.
    async fn extend_if_owner(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool> {
        let exptime = exptime(ttl);
        self.write_if_owner(key, owner, "compare-and-set", |cas| {
            self.client.set_if(key, owner, exptime, cas)
        })
        .await
    }

    /// Reads `key` and, if `owner` holds it, applies `write` on the CAS just
    /// read. `true` if a write applied, `false` if the key is gone or holds
    /// another owner's token.
    ///
    /// The CAS can move while the item stays ours: a write of this owner's
    /// that was cut on our side (a renewal whose future was dropped, or timed
    /// out) may still land between our read and our write. That says nothing
    /// about who holds the lock, so the read is repeated and the write
    /// retried, a bounded number of times. Each write still applies only to
    /// the very item its read saw holding our token, so a retry can never
    /// touch another owner's lock.
    async fn write_if_owner<F, W>(
        &self,
        key: &str,
        owner: &str,
        what: &'static str,
        write: F,
    ) -> Result<bool>
    where
        F: Fn(u64) -> W,
        W: Future<Output = Result<bool>>,
    {
        for attempt in 0..=OWNER_WRITE_ATTEMPTS {
            let cas = match self.client.get(key).await? {
                Some(item) if item.value == owner => item.cas,
                _ => return Ok(false),
            };
            if attempt == OWNER_WRITE_ATTEMPTS {
                break;
            }
            if write(cas).await? {
                return Ok(true);
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

    /// Deletes `name` only if `owner` holds it. `true` if deleted.
    async fn delete_if_owner(&self, name: &LockName, owner: OwnerToken) -> Result<bool> {
        let key = self.key(name);
        self.write_if_owner(&key, &owner.to_hex(), "compare-and-delete", |cas| {
            self.client.delete_if(&key, cas)
        })
        .await
    }
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
        // If the key is ours already, an earlier attempt's add was applied
        // and its reply (or its token's) lost. Its expiry runs from that
        // attempt, and it may never have drawn a token, so the counter may
        // still hold the previous holder's: renew the expiry from this send,
        // and draw a token as a fresh grant does.
        let granted = self.client.add(&key, &owner, exptime(req.ttl)).await?
            || self.extend_if_owner(&key, &owner, req.ttl).await?;
        if !granted {
            return Ok(None);
        }
        let token = self.next_token(&req.name).await?;
        Ok(Some(lease(&req.name, req.owner, token, req.ttl, sent)))
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(self, req, budget, Some(&self.signals)).await
    }

    async fn renew(&self, lease_now: &Lease, ttl: Duration) -> Result<Lease> {
        // The lease counts from before the first read, even when a later
        // try's write is the one that applied: every write is sent after
        // this instant, so the lease never outlasts the expiry it set.
        let sent = Instant::now();
        let key = self.key(lease_now.name());
        let owner = lease_now.owner().to_hex();
        if self.extend_if_owner(&key, &owner, ttl).await? {
            Ok(lease(
                lease_now.name(),
                lease_now.owner(),
                lease_now.token(),
                ttl,
                sent,
            ))
        } else {
            Err(Error::not_held(lease_now.name()))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let deleted = self.delete_if_owner(lease.name(), lease.owner()).await?;
        self.signals.notify(lease.name());
        if deleted {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.delete_if_owner(&req.name, req.owner).await?;
        self.signals.notify(&req.name);
        Ok(())
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
