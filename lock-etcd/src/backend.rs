//! [`EtcdBackend`]: the [`LockBackend`] impl over the queue protocol in
//! `queue.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions, SortOrder, SortTarget};
use lock_core::backend::{
    AcquireRequest, BackendStats, Backoff, Holder, Lease, LockBackend, Retry, WaitBudget,
    async_trait,
};
use lock_core::{Capabilities, Error, FencingToken, LockName, Result};
use tokio::time::Instant;

use crate::config::EtcdConfig;
use crate::error::{convert, lease_not_found};
use crate::queue::lease_id;

/// etcd grants leases in whole seconds and never shorter than its minimum,
/// 1.5 × the election timeout rounded up: 2 s with the default 1 s election
/// timeout. Shorter TTLs are refused rather than silently lengthened.
pub const MIN_TTL: Duration = Duration::from_secs(2);

const CAPABILITIES: Capabilities = Capabilities::consensus_queue(crate::NAME, MIN_TTL);

/// A lock backend on an etcd cluster (see the crate docs).
#[derive(Clone)]
pub struct EtcdBackend {
    pub(crate) client: Client,
    pub(crate) config: Arc<EtcdConfig>,
    pub(crate) wakeups: Arc<AtomicU64>,
}

impl EtcdBackend {
    /// Connects to the cluster an `etcd://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(EtcdConfig::parse(url)?).await
    }

    /// Connects to the cluster `config` names; see [`connect`](Self::connect).
    pub async fn connect_with(config: EtcdConfig) -> Result<Self> {
        let mut options = ConnectOptions::new()
            .with_timeout(config.timeout)
            .with_connect_timeout(config.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), config.timeout);
        if let Some((user, password)) = &config.credentials {
            options = options.with_user(user.clone(), password.clone());
        }
        if config.tls {
            options = options.with_tls(etcd_client::TlsOptions::new());
        }
        let connect = Client::connect(config.endpoints.clone(), Some(options));
        let client = tokio::time::timeout(config.connect_timeout, connect)
            .await
            .map_err(|_| Error::timeout("connecting to etcd", config.connect_timeout))?
            .map_err(|e| convert("connect", e))?;
        let backend = Self {
            client,
            config: Arc::new(config),
            wakeups: Arc::new(AtomicU64::new(0)),
        };
        // The client connects lazily; make an unreachable cluster fail here.
        backend
            .call("connect", |mut c| async move { c.status().await })
            .await?;
        Ok(backend)
    }
}

#[async_trait]
impl LockBackend for EtcdBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// `wakeups`: watch events that woke a waiter: one per release with FIFO
    /// waiters, since each waiter watches only its predecessor.
    fn stats(&self) -> BackendStats {
        BackendStats::default().with_wakeups(self.wakeups.load(Ordering::Relaxed))
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let sent = Instant::now();
        let place = self.enqueue(req).await?;
        if place.revision == place.holder_revision {
            return Ok(Some(self.lease_for(req, &place, sent)));
        }
        self.dequeue(place.lease).await?;
        Ok(None)
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        let lease = lease_id(req.owner);
        // Our lease must outlive the wait, however long it is.
        let keeper = self.keep_queued(lease, req.ttl);
        let mut retry = Retry::new(crate::NAME, budget, Backoff::new());
        let outcome = loop {
            let attempt = async {
                let sent = Instant::now();
                let place = self.enqueue(req).await?;
                if place.revision == place.holder_revision && place.fresh {
                    // First in line on a lease this attempt granted: its TTL
                    // runs from the grant, sent at `sent`, as `try_acquire`'s.
                    return Ok((place, sent));
                }
                if place.revision != place.holder_revision {
                    self.wait_for_turn(&req.name, &place, budget).await?;
                }
                // The lease was kept alive while we waited (or granted by an
                // earlier attempt); the grant's deadline counts from this
                // renewal.
                let renewed = Instant::now();
                if !self.keep_alive(place.lease).await? {
                    return Err(Error::not_held(&req.name));
                }
                Ok::<_, Error>((place, renewed))
            };
            match attempt.await {
                Ok(granted) => break Ok(granted),
                // A member died or an election is running: queue again
                // (idempotent: same lease, same key, same place if it
                // survived) within the budget.
                Err(e) => {
                    if let Err(e) = retry.after(e).await {
                        break Err(e);
                    }
                }
            }
        };
        keeper.abort();
        match outcome {
            Ok((place, renewed)) => Ok(self.lease_for(req, &place, renewed)),
            Err(e) => {
                if let Err(cleanup) = self.dequeue(lease).await {
                    tracing::debug!(error = %cleanup, "could not leave the queue; the lease's TTL will");
                }
                Err(e)
            }
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let sent = Instant::now();
        let id = lease_id(lease.owner());
        let key = self.key(lease.name(), id);
        let (alive, mine) = tokio::join!(
            self.keep_alive(id),
            self.call(
                "check our key",
                |mut c| async move { c.get(key, None).await }
            )
        );
        let token = lease.token().to_i64();
        let still_ours = mine?
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == token);
        if !alive? || !still_ours {
            return Err(Error::not_held(lease.name()));
        }
        // etcd renews a lease to the TTL it was granted with, whatever `ttl` asks.
        let _ = ttl;
        Ok(lease.renewed(lease.ttl(), sent))
    }

    /// One `LeaseRevoke`: revoking the lease deletes every key attached to
    /// it, and the lease ID is derived from the owner token, so only the
    /// owner can revoke it and the next holder's key (under its own lease) is
    /// never touched. A lease that expired or was already revoked is
    /// `ErrGRPCLeaseNotFound`: [`Error::NotHeld`].
    async fn release(&self, lease: &Lease) -> Result<()> {
        let id = lease_id(lease.owner());
        let revoked = self
            .call("release", |mut c| async move {
                match c.lease_revoke(id).await {
                    Err(e) if lease_not_found(&e) => Ok(false),
                    other => other.map(|_| true),
                }
            })
            .await?;
        if revoked {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.dequeue(lease_id(req.owner)).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let dir = self.dir(name);
        let found = self
            .call("find the holder", |mut c| async move {
                c.get(dir, Some(first)).await
            })
            .await?;
        let Some(kv) = found.kvs().first() else {
            return Ok(None);
        };
        let lease = kv.lease();
        let ttl = self
            .call("read the lease", |mut c| async move {
                c.lease_time_to_live(lease, None).await
            })
            .await
            .ok()
            .map(|t| Duration::from_secs(u64::try_from(t.ttl()).unwrap_or(0)));
        let owner = kv.value_str().unwrap_or_default();
        let mut holder = Holder::new(owner, FencingToken::from_i64(kv.create_revision()), ttl);
        if owner.is_empty() {
            // Taken by a client that stores no owner token: name it by its lease.
            holder.owner = format!("{lease:x}");
        }
        Ok(Some(holder))
    }
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
