//! [`EtcdBackend`]: etcd's own lock protocol (the one behind `etcdctl lock`
//! and the Go client's `concurrency.Mutex`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseGrantOptions, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use lock_core::wait::Backoff;
use lock_core::{
    AcquireRequest, BackendStats, Capabilities, Error, Fencing, FencingToken, Holder, Lease,
    LockBackend, LockName, OwnerToken, Result, WaitBudget, async_trait,
};
use tokio::time::Instant;

use crate::config::EtcdConfig;

/// etcd grants leases in whole seconds and never shorter than its minimum,
/// 1.5 × the election timeout rounded up: 2 s with the default 1 s election
/// timeout. Shorter TTLs are refused rather than silently lengthened.
pub const MIN_TTL: Duration = Duration::from_secs(2);

const CAPABILITIES: Capabilities = Capabilities::new(crate::NAME, Fencing::Strict)
    .with_server_side_wait(true)
    .with_fifo(true)
    .with_survives_node_loss(true)
    .with_ttl_range(MIN_TTL, Capabilities::DEFAULT_MAX_TTL);

/// A lock backend on an etcd cluster (see the crate docs).
#[derive(Clone)]
pub struct EtcdBackend {
    client: Client,
    config: Arc<EtcdConfig>,
    wakeups: Arc<AtomicU64>,
}

/// Where one contender stands in a lock's queue.
struct Place {
    key: String,
    lease: i64,
    revision: i64,
    holder_revision: i64,
}

impl EtcdBackend {
    /// Connects to the cluster an `etcd://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        let config = EtcdConfig::parse(url)?;
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
            .map_err(|_| Error::Timeout {
                operation: "connecting to etcd",
                after: config.connect_timeout,
            })?
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

    /// Runs one request within the timeout.
    async fn call<T, F, Fut>(&self, operation: &'static str, request: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        tokio::time::timeout(self.config.timeout, request(self.client.clone()))
            .await
            .map_err(|_| Error::Timeout {
                operation,
                after: self.config.timeout,
            })?
            .map_err(|e| convert(operation, e))
    }

    /// The key range of one lock: `{prefix}{name}/`, as etcd's Mutex uses.
    fn dir(&self, name: &LockName) -> String {
        format!("{}{name}/", self.config.prefix)
    }

    fn key(&self, name: &LockName, lease: i64) -> String {
        format!("{}{lease:x}", self.dir(name))
    }

    /// Joins the queue of `req.name`: a lease, and a key under it whose
    /// create revision orders us among the contenders. Idempotent for the
    /// owner: the lease ID and so the key are derived from the owner token.
    async fn enqueue(&self, req: &AcquireRequest) -> Result<Place> {
        let lease = lease_id(req.owner);
        let seconds = i64::try_from(req.ttl.as_secs() + u64::from(req.ttl.subsec_nanos() > 0))
            .unwrap_or(i64::MAX);
        let granted = self
            .call("grant a lease", |mut c| async move {
                c.lease_grant(seconds, Some(LeaseGrantOptions::new().with_id(lease)))
                    .await
            })
            .await;
        match granted {
            Err(e) if e.to_string().contains("lease already exists") => {} // our own earlier attempt
            other => {
                other?;
            }
        }
        let key = self.key(&req.name, lease);
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    req.owner.to_hex(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::get(self.dir(&req.name), Some(first.clone())),
            ])
            .or_else([
                TxnOp::get(key.clone(), None),
                TxnOp::get(self.dir(&req.name), Some(first)),
            ]);
        let response = self
            .call("enqueue", |mut c| async move { c.txn(txn).await })
            .await?;
        let ops = response.op_responses();
        let revision = match ops.first() {
            Some(TxnOpResponse::Put(put)) => put.header().map(|h| h.revision()),
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        };
        let holder_revision = match ops.get(1) {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        };
        match (revision, holder_revision) {
            (Some(revision), Some(holder_revision)) => Ok(Place {
                key,
                lease,
                revision,
                holder_revision,
            }),
            _ => Err(Error::backend(
                "etcd answered the enqueue transaction without the expected keys",
            )),
        }
    }

    /// Leaves the queue: revoking the lease deletes the key with it.
    async fn dequeue(&self, lease: i64) -> Result<()> {
        let revoked = self
            .call("revoke a lease", |mut c| async move {
                c.lease_revoke(lease).await
            })
            .await;
        match revoked {
            Err(e) if e.to_string().contains("requested lease not found") => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Waits until every key created before ours is gone, watching only the
    /// one just before ours each time, then checks that our own key (and so
    /// our lease) survived the wait.
    async fn wait_for_turn(
        &self,
        name: &LockName,
        place: &Place,
        budget: &WaitBudget,
    ) -> Result<()> {
        loop {
            let before_us = GetOptions::new()
                .with_prefix()
                .with_max_create_revision(place.revision - 1)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1)
                .with_keys_only();
            let dir = self.dir(name);
            let found = self
                .call("find the predecessor", |mut c| async move {
                    c.get(dir, Some(before_us)).await
                })
                .await?;
            let Some(predecessor) = found.kvs().first().map(|kv| kv.key().to_vec()) else {
                break;
            };
            let since = found.header().map_or(0, |h| h.revision()) + 1;
            let options = WatchOptions::new().with_start_revision(since);
            let mut watch = self
                .call("watch the predecessor", |mut c| async move {
                    c.watch(predecessor, Some(options)).await
                })
                .await?;
            let deleted = async {
                while let Some(message) = watch.message().await.map_err(|e| convert("watch", e))? {
                    if message
                        .events()
                        .iter()
                        .any(|e| e.event_type() == etcd_client::EventType::Delete)
                    {
                        return Ok(());
                    }
                    if message.canceled() {
                        return Err(Error::Unavailable {
                            backend: crate::NAME,
                            message: format!(
                                "the watch was cancelled: {}",
                                message.cancel_reason()
                            ),
                            source: None,
                        });
                    }
                }
                Err(Error::Unavailable {
                    backend: crate::NAME,
                    message: "the watch stream ended".into(),
                    source: None,
                })
            };
            match budget.race(deleted).await {
                None => return Err(budget.exhausted(name)),
                Some(Err(e)) if e.is_retryable() && !budget.is_over() => {
                    tracing::debug!(error = %e, "watch failed; looking for the predecessor again");
                }
                Some(outcome) => {
                    outcome?;
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // Jepsen found etcd 3.4.3's lock granting waiters whose lease had
        // expired while they waited: make sure ours is still there.
        let key = place.key.clone();
        let mine = self
            .call(
                "check our key",
                |mut c| async move { c.get(key, None).await },
            )
            .await?;
        match mine.kvs().first() {
            Some(kv) if kv.create_revision() == place.revision => Ok(()),
            _ => Err(Error::NotHeld {
                name: name.to_string(),
            }),
        }
    }

    /// Keeps `lease` alive while its owner waits in the queue.
    fn keep_queued(&self, lease: i64, ttl: Duration) -> tokio::task::JoinHandle<()> {
        let backend = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                if let Err(e) = backend.keep_alive(lease).await {
                    tracing::debug!(error = %e, "keeping a queued lease alive failed");
                }
            }
        })
    }

    /// One keep-alive; the lease's remaining TTL in seconds (0: it is gone).
    async fn keep_alive(&self, lease: i64) -> Result<i64> {
        self.call("keep the lease alive", |mut c| async move {
            let exchange = async {
                let (mut keeper, mut answers) = c.lease_keep_alive(lease).await?;
                keeper.keep_alive().await?;
                Ok(answers.message().await?.map_or(0, |a| a.ttl()))
            };
            match exchange.await {
                // An expired or revoked lease: not an outage.
                Err(etcd_client::Error::LeaseKeepAliveError(e))
                    if e.contains("lease not found") =>
                {
                    Ok(0)
                }
                other => other,
            }
        })
        .await
    }

    fn lease_for(&self, req: &AcquireRequest, place: &Place, sent: Instant) -> Lease {
        let token = FencingToken(u64::try_from(place.revision).unwrap_or(0));
        Lease::new(req.name.clone(), req.owner, token, req.ttl, sent)
    }
}

/// The lease ID for an owner: 63 bits of its token, never 0 (which asks the
/// server to choose).
fn lease_id(owner: OwnerToken) -> i64 {
    let bits = (owner.to_u128() as u64) >> 1;
    i64::try_from(bits).unwrap_or(i64::MAX).max(1)
}

fn convert(operation: &'static str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(status)
            if matches!(
                status.code(),
                // Unknown: a broken HTTP/2 stream to a member that died.
                tonic_code::Unavailable
                    | tonic_code::DeadlineExceeded
                    | tonic_code::Aborted
                    | tonic_code::ResourceExhausted
                    | tonic_code::Unknown
            ) =>
        {
            Error::Unavailable {
                backend: crate::NAME,
                message: format!("{operation}: {}", status.message()),
                source: Some(Box::new(status)),
            }
        }
        E::TransportError(_)
        | E::IoError(_)
        | E::WatchError(_)
        | E::LeaseKeepAliveError(_)
        | E::EndpointError(_) => Error::Unavailable {
            backend: crate::NAME,
            message: format!("{operation}: {e}"),
            source: Some(Box::new(e)),
        },
        other => Error::Backend {
            message: format!("etcd {operation}: {other}"),
            source: Some(Box::new(other)),
        },
    }
}

use tonic::Code as tonic_code;

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
        let mut backoff = Backoff::new();
        let outcome = loop {
            let attempt = async {
                let place = self.enqueue(req).await?;
                if place.revision != place.holder_revision {
                    self.wait_for_turn(&req.name, &place, budget).await?;
                }
                // The lease was kept alive while we waited; the grant's
                // deadline counts from this renewal.
                let renewed = Instant::now();
                if self.keep_alive(place.lease).await? <= 0 {
                    return Err(Error::NotHeld {
                        name: req.name.to_string(),
                    });
                }
                Ok::<_, Error>((place, renewed))
            };
            match attempt.await {
                Ok(granted) => break Ok(granted),
                // A member died or an election is running: queue again
                // (idempotent: same lease, same key, same place if it
                // survived) within the budget.
                Err(e)
                    if e.is_retryable()
                        && !matches!(e, Error::Busy { .. } | Error::WaitTimeout { .. }) =>
                {
                    tracing::debug!(error = %e, "waiting for an etcd lock failed; trying again");
                    if !budget.sleep(backoff.next_nap()).await {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
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
        let (remaining, mine) = tokio::join!(
            self.keep_alive(id),
            self.call(
                "check our key",
                |mut c| async move { c.get(key, None).await }
            )
        );
        let token = i64::try_from(lease.token().get()).unwrap_or(i64::MAX);
        let still_ours = mine?
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == token);
        if remaining? <= 0 || !still_ours {
            return Err(Error::NotHeld {
                name: lease.name().to_string(),
            });
        }
        // etcd renews a lease to the TTL it was granted with, whatever `ttl` asks.
        let _ = ttl;
        Ok(lease.renewed(lease.ttl(), sent))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let id = lease_id(lease.owner());
        let key = self.key(lease.name(), id);
        let token = i64::try_from(lease.token().get()).unwrap_or(i64::MAX);
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                token,
            )])
            .and_then([TxnOp::delete(key, None)]);
        let deleted = self
            .call("release", |mut c| async move { c.txn(txn).await })
            .await?;
        self.dequeue(id).await?;
        if deleted.succeeded() {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: lease.name().to_string(),
            })
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
        Ok(Some(Holder {
            owner: if owner.is_empty() {
                format!("{lease:x}")
            } else {
                owner.chars().take(8).collect()
            },
            token: FencingToken(u64::try_from(kv.create_revision()).unwrap_or(0)),
            expires_in: ttl,
        }))
    }
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
