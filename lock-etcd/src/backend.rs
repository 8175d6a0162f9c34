//! [`EtcdBackend`]: the [`LockBackend`] impl over the queue protocol in
//! `queue.rs`, for every kind of lock: the mutex and the read-write lock
//! are lines of that queue; a semaphore adds the permit step of
//! `semaphore.rs` once its internal lock is ours.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, SortOrder, SortTarget};
use lock_core::backend::{
    AcquireRequest, BackendStats, Backoff, Holder, Lease, LockBackend, Retry, WaitBudget,
    async_trait,
};
use lock_core::{Capabilities, Error, Family, FencingToken, LockKind, LockName, Result};

use crate::config::{EtcdConfig, EtcdOptions};
use crate::handover::EtcdHandovers;
use crate::queue::{Ahead, Line, Place, Requeue, still_ours};
use crate::session::{Session, Sessions};

/// etcd grants leases in whole seconds and never shorter than its minimum,
/// 1.5 × the election timeout rounded up: 2 s with the default 1 s election
/// timeout. Shorter TTLs are refused rather than silently lengthened.
pub const MIN_TTL: Duration = Duration::from_secs(2);

const CAPABILITIES: Capabilities = Capabilities::consensus_queue(crate::NAME, MIN_TTL)
    .with_semaphores(true)
    .with_read_write(true);

/// A lock backend on an etcd cluster (see the crate docs).
#[derive(Clone)]
pub struct EtcdBackend {
    pub(crate) client: Client,
    pub(crate) options: Arc<EtcdOptions>,
    pub(crate) wakeups: Arc<AtomicU64>,
    pub(crate) sessions: Arc<Sessions>,
    /// Waiters a release of this backend can grant directly.
    pub(crate) handovers: Arc<EtcdHandovers>,
}

impl EtcdBackend {
    /// Connects to the cluster an `etcd://` URL names.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(EtcdConfig::parse(url)?).await
    }

    /// Connects to the cluster `config` names; see [`connect`](Self::connect).
    pub async fn connect_with(config: EtcdConfig) -> Result<Self> {
        let started = tokio::time::Instant::now();
        // A failed TLS handshake shows either here, when the client opens
        // its connection at once, or at the first request: both are
        // explained the same way.
        let client = match crate::client::connect(&config).await {
            Ok(client) => client,
            Err(e) => return Err(crate::probe::explain(&config, started, e).await),
        };
        match Self::start(client, EtcdOptions::of(&config)).await {
            Err(e) => Err(crate::probe::explain(&config, started, e).await),
            started => started,
        }
    }

    /// A backend on the cluster an `etcd_client::Client` of the
    /// application's reaches, with `options` in place of a URL's. Every
    /// request goes through clones of that client (they share its
    /// connections), each bounded by the options' timeout; the session
    /// leases are the backend's own, granted and kept alive by it, and
    /// never those of other users of the client.
    ///
    /// Connect the client with a keep-alive (`ConnectOptions::with_keep_alive`,
    /// as [`connect`](Self::connect) does) so that a connection to a member
    /// that died unannounced is noticed.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_etcd::EtcdBackend;
    /// use lock_etcd::config::EtcdOptions;
    ///
    /// let client = etcd_client::Client::connect(["127.0.0.1:2379"], None).await.unwrap();
    /// let backend = EtcdBackend::from_client(client.clone(), EtcdOptions::new().prefix("app")).await?;
    /// let locker = Locker::new(backend);
    /// let guard = locker.lock("schema-migration").await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: Client, options: EtcdOptions) -> Result<Self> {
        Self::start(client, options.check()?).await
    }

    /// The backend on `client`, once the cluster has answered.
    async fn start(client: Client, options: EtcdOptions) -> Result<Self> {
        let backend = Self {
            client,
            options: Arc::new(options),
            wakeups: Arc::new(AtomicU64::new(0)),
            sessions: Arc::default(),
            handovers: Arc::default(),
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
    /// waiters, since each waiter watches only its predecessor; about one
    /// per release of a permit, which wakes the holder of the semaphore's
    /// internal lock, plus one when that lock passes on.
    fn stats(&self) -> BackendStats {
        BackendStats::default().with_wakeups(self.wakeups.load(Ordering::Relaxed))
    }

    /// One attempt: first in line is a grant, except that a semaphore's
    /// internal lock also needs a free permit. Anybody else in line (for a
    /// semaphore: somebody holding its internal lock, who may be about to
    /// take the last permit) makes it `None`.
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let line = self.line(req);
        let mut queued = Queued::new(self, req);
        let Some((place, session)) = self.join_queue(req, &line, &mut queued).await? else {
            queued.leave().await;
            return Err(session_lost());
        };
        if matches!(place.ahead, Ahead::Nobody)
            && let Some(lease) = self.grant(req, &line, &place, &session, None).await?
        {
            queued.armed = false;
            return Ok(Some(lease));
        }
        queued.leave().await;
        Ok(None)
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        let mut queued = Queued::new(self, req);
        let mut retry = Retry::new(crate::NAME, budget, Backoff::new());
        loop {
            match self.attempt(req, budget, &mut queued).await {
                Ok(lease) => {
                    queued.armed = false;
                    return Ok(lease);
                }
                // A member died or an election is running: queue again
                // (idempotent: same key, same place if it survived) within
                // the budget.
                Err(e) => {
                    if let Err(e) = retry.after(e).await {
                        // The server answered: leave now, so that the queue
                        // is as the caller left it. It did not: leave in the
                        // background (`Queued`'s drop), not in front of the
                        // caller.
                        if !e.is_transient() {
                            queued.leave().await;
                        }
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Extends the lock by keeping its session's lease alive (one
    /// keep-alive shared by every lock on the session that renews at about
    /// the same time), and reads our key in parallel: 1 round trip. The
    /// deadline counts from the keep-alive's send time, or the younger
    /// proof it shared; etcd renews a lease to the TTL it was granted with,
    /// whatever `ttl` asks.
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let _ = ttl;
        // The session is the one this client granted the lock on: a lease
        // it did not grant (or one whose session it knows gone or expired)
        // is not renewed, so a renewal never keeps anybody else's lease alive.
        let session = self
            .session_of(lease)
            .ok_or_else(|| Error::not_held(lease.name()))?;
        let key = self.held_key(lease.name(), lease.owner(), lease.kind());
        let key_of_lease = key.clone();
        let (alive, mine) = tokio::join!(
            self.prove_alive(&session, session.renew_after() / 2),
            self.call(
                "check our key",
                |mut c| async move { c.get(key, None).await }
            )
        );
        let token = lease.token().to_i64();
        let ours = still_ours(&mine?, token, session.id);
        if !alive? || !ours {
            return Err(Error::not_held(lease.name()));
        }
        let renewed = lease.renewed(lease.ttl(), session.proven());
        if !session.extend(&key_of_lease, token, renewed.deadline()) {
            return Err(Error::not_held(lease.name()));
        }
        Ok(renewed)
    }

    /// Our key is there with our fencing token as its create revision: a
    /// key lives only as long as its session's lease, so the server has not
    /// expired it. The read is linearizable, so a cut-off member cannot
    /// answer it from its stale state.
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let key = self.held_key(lease.name(), lease.owner(), lease.kind());
        let found = self
            .call(
                "check our key",
                |mut c| async move { c.get(key, None).await },
            )
            .await?;
        let token = lease.token().to_i64();
        Ok(found
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == token))
    }

    /// One `Txn` deleting our key if its create revision is still our
    /// fencing token: the key and the token name this grant alone, so the
    /// next holder's key is never touched, and the session's lease, shared
    /// with this client's other locks, is left alone. A key that is gone
    /// (expired with the session, or deleted) is [`Error::NotHeld`].
    ///
    /// Only the mutex and a writer hand over (`handover.rs`): theirs was
    /// the oldest key. A reader's was not (older readers may hold), nor a
    /// permit's lease key (nobody watches it alone).
    async fn release(&self, lease: &Lease) -> Result<()> {
        let key = self.held_key(lease.name(), lease.owner(), lease.kind());
        let token = lease.token().to_i64();
        let deleted = if lease.kind().is_exclusive() {
            self.release_and_hand_over(&key, token).await?
        } else {
            let compare = Compare::create_revision(key.as_str(), CompareOp::Equal, token);
            self.delete_if(&key, compare).await?
        };
        if let Some(session) = self.session_of(lease) {
            session.forget(&key);
        }
        if deleted {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    /// Deletes every key of `req`'s owner in `req`'s family (a semaphore's
    /// key in its internal lock's line and its lease key; a read-write
    /// lock's keys of both sides), each only if its value is still the
    /// owner's token.
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.leave_or_orphan(&self.family_keys(req), &req.owner.to_hex(), req.ttl)
            .await
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        if kind.family() != Family::Mutex {
            return self.group_holders(name, kind).await;
        }
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
            return Ok(Vec::new());
        };
        let lease = kv.lease();
        let ttl = self.lease_left(lease).await;
        let owner = kv.value_str().unwrap_or_default();
        let mut holder = Holder::new(owner, FencingToken::from_i64(kv.create_revision()), ttl);
        if owner.is_empty() {
            // Taken by a client that stores no owner token: name it by its lease.
            holder.owner = format!("{lease:x}");
        }
        Ok(vec![holder])
    }
}

impl EtcdBackend {
    /// The session a grant was made on, from the lease ID its lease carries
    /// as its version, if this client granted that session and it may still
    /// be alive.
    fn session_of(&self, lease: &Lease) -> Option<Arc<Session>> {
        let id = i64::try_from(lease.version()?).ok()?;
        self.sessions.by_id(id)
    }

    /// One attempt of `acquire`: queue on a current session (again, at most
    /// [`REQUEUES`] times, if it turns out gone), then wait for our turn,
    /// keeping the session alive meanwhile (for a permit, also while it
    /// waits for a lease key to go).
    async fn attempt(
        &self,
        req: &AcquireRequest,
        budget: &WaitBudget,
        queued: &mut Queued,
    ) -> Result<Lease> {
        budget.attempted();
        let line = self.line(req);
        let Some((place, session)) = self.join_queue(req, &line, queued).await? else {
            return Err(session_lost());
        };
        let first = matches!(place.ahead, Ahead::Nobody);
        let permit = matches!(req.kind, LockKind::Permit { .. });
        let _keeper = (!first || permit).then(|| self.keep_queued(&session));
        if !first {
            if budget.is_over() {
                return Err(budget.exhausted(&req.name));
            }
            budget.waiting();
            self.wait_for_turn(req, &line, &place, &session, budget)
                .await?;
        }
        self.grant(req, &line, &place, &session, Some(budget))
            .await?
            .ok_or_else(|| budget.exhausted(&req.name))
    }

    /// The grant to `place`, first in `line`. A permit is taken by the
    /// holder of the semaphore's internal lock (waiting within `budget` if
    /// it is given one), which then passes that lock on.
    async fn grant(
        &self,
        req: &AcquireRequest,
        line: &Line,
        place: &Place,
        session: &Arc<Session>,
        budget: Option<&WaitBudget>,
    ) -> Result<Option<Lease>> {
        let LockKind::Permit { permits } = req.kind else {
            return Ok(Some(self.lease_for(
                req,
                &line.key,
                place.revision,
                session,
            )));
        };
        let lease = self.take_permit(req, permits, session, budget).await?;
        if lease.is_some() {
            self.pass_turn(req, line, place).await;
        }
        Ok(lease)
    }

    /// Releases a semaphore's internal lock once the permit is ours,
    /// handing it to the next contender of this backend if it waits. The
    /// permit is held whatever happens here: a key the server could not be
    /// told to delete is left to the session's next keep-alive.
    async fn pass_turn(&self, req: &AcquireRequest, line: &Line, place: &Place) {
        if let Err(e) = self.release_and_hand_over(&line.key, place.revision).await {
            tracing::debug!(error = %e, "could not pass a semaphore's internal lock on; the next keep-alive will");
            self.orphan(&line.key, &req.owner.to_hex(), req.ttl);
        }
    }

    /// Puts our key in `line` on a live session: the session for the
    /// TTL, then the queue `Txn`, on a new session when that one turned out
    /// dead, up to [`REQUEUES`] sessions. `None` when every one was dead.
    async fn join_queue(
        &self,
        req: &AcquireRequest,
        line: &Line,
        queued: &mut Queued,
    ) -> Result<Option<(Place, Arc<Session>)>> {
        for _ in 0..REQUEUES {
            let session = self.session(req.ttl).await?;
            queued.session = Some(session.clone());
            match self.enqueue(req, line, &session).await? {
                Ok(place) => return Ok(Some((place, session))),
                Err(Requeue) => continue,
            }
        }
        Ok(None)
    }
}

/// How many sessions one attempt tries before it reports an outage.
const REQUEUES: usize = 3;

fn session_lost() -> Error {
    Error::unavailable(
        crate::NAME,
        "session leases expired as soon as they were granted",
    )
}

/// An acquisition's keys (in line, and a permit's lease key) until it is
/// granted or has left. If the acquire's future is dropped before either (a
/// caller of the backend that does not go through `Locker`), the keys are
/// deleted in the background: on a session lease other locks keep alive,
/// nothing else would ever delete them.
struct Queued {
    backend: EtcdBackend,
    keys: Vec<String>,
    owner: String,
    ttl: Duration,
    session: Option<Arc<Session>>,
    armed: bool,
}

impl Queued {
    fn new(backend: &EtcdBackend, req: &AcquireRequest) -> Self {
        Self {
            backend: backend.clone(),
            keys: backend.keys_of(req),
            owner: req.owner.to_hex(),
            ttl: req.ttl,
            session: None,
            armed: true,
        }
    }

    /// Leaves the queue now (or, if the server cannot be reached, at the
    /// session's next keep-alive).
    async fn leave(&mut self) {
        if self.session.is_some()
            && let Err(e) = self
                .backend
                .leave_or_orphan(&self.keys, &self.owner, self.ttl)
                .await
        {
            tracing::debug!(error = %e, "could not leave the queue; the next keep-alive will");
        }
        self.armed = false;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.armed || self.session.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime: the session's lease expires with the process
        };
        let (backend, keys, owner, ttl) = (
            self.backend.clone(),
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.owner),
            self.ttl,
        );
        runtime.spawn(async move {
            let _ = backend.leave_or_orphan(&keys, &owner, ttl).await;
        });
    }
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}
