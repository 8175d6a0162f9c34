//! Session leases, as etcd's own `concurrency.Session`: one lease per client
//! and lease TTL, shared by every key that client queues or holds with that
//! TTL, so that acquiring is the queue transaction alone and a release
//! deletes one key without touching the lease.
//!
//! What a lock may rely on is the session's *proof*: the send time of the
//! last `LeaseGrant` or keep-alive whose answer showed the lease alive. The
//! leader (re)starts the lease's TTL when it handles that request, so the
//! lease, and every key on it, lives at least until the proof plus the TTL,
//! unless somebody revokes it. A lock's deadline counts from the proof, never
//! from the request that put its key: a shared lease may be closer to its
//! end than a fresh one.
//!
//! A lock's key lives as long as its session, so a lock that stops being
//! renewed (its holder gave up on it without releasing it) would stay held
//! as long as the client's other locks keep the session alive. The session
//! therefore records the deadline of each lock granted on it, and every
//! keep-alive also deletes the keys of locks whose deadline has passed: such
//! a lock is freed at most a renewal period after its deadline, or with the
//! session's lease if nothing renews it.
//!
//! Nothing keeps a session alive in the background. Keep-alives are sent on
//! demand, by the renewals of the locks on it, by the keepers of queued
//! waiters, and by an acquire that finds the proof getting old; a session
//! nobody uses any more simply expires on the server. Once a keep-alive
//! finds the lease gone, the session is never used again, and the next
//! acquire grants a new one.
//!
//! No caller waits for more than one request's timeout here, whatever else
//! is going on: a caller that needs a keep-alive (or a lease grant) while
//! one is in flight joins it and gets its outcome, failure included,
//! instead of queueing for one of its own after it (lock-core's
//! `SingleFlight`); and the deletion of orphaned keys runs beside the
//! keep-alives, in the background, never in front of a caller.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{Compare, GetResponse};
use lock_core::Result;
use lock_core::backend::SingleFlight;
use tokio::time::Instant;

use crate::client::Core;
use crate::layout::shown;
use crate::mark::Mark;

/// One session lease.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: i64,
    /// The lease's TTL, in the whole seconds it was granted with.
    pub(crate) ttl: Duration,
    state: Mutex<State>,
    /// One keep-alive at a time: callers that come while one is in flight
    /// share its outcome and send none of their own.
    flight: SingleFlight<bool>,
}

#[derive(Debug)]
struct State {
    proven: Instant,
    gone: bool,
    /// Queue keys of acquires that could not be deleted when they were
    /// given up (the server was unreachable): retried, in the background,
    /// with every keep-alive, since a lease kept alive by other locks would
    /// otherwise keep them queued, or holding, for good.
    orphans: Vec<Orphan>,
    /// The locks granted on this session and not released, by key: their
    /// fencing token and deadline.
    held: HashMap<String, (i64, Instant)>,
}

/// A key to delete if it still is the one we mean.
#[derive(Clone, Debug)]
pub(crate) struct Orphan {
    pub(crate) key: String,
    pub(crate) mark: Mark,
}

impl Orphan {
    /// What holds as long as the key is ours.
    fn compare(&self) -> Compare {
        self.mark.compare(&self.key)
    }
}

impl Session {
    fn new(id: i64, ttl: Duration, proven: Instant) -> Self {
        Self {
            id,
            ttl,
            state: Mutex::new(State {
                proven,
                gone: false,
                orphans: Vec::new(),
                held: HashMap::new(),
            }),
            flight: SingleFlight::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The send time of the last request that proved the lease alive.
    pub(crate) fn proven(&self) -> Instant {
        self.state().proven
    }

    fn prove(&self, sent: Instant) {
        let mut state = self.state();
        state.proven = state.proven.max(sent);
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.state().gone
    }

    /// The lease expired or was revoked: so did every key on it.
    pub(crate) fn kill(&self) {
        let mut state = self.state();
        state.gone = true;
        state.orphans.clear();
        state.held.clear();
    }

    /// Records a grant, valid until `deadline`.
    pub(crate) fn hold(&self, key: &str, token: i64, deadline: Instant) {
        let mut state = self.state();
        if !state.gone {
            state.held.insert(key.to_owned(), (token, deadline));
        }
    }

    /// Records a renewal; `false` if the grant is not held any more (a
    /// keep-alive deleted its key when its deadline passed, perhaps after
    /// the renewal read it).
    pub(crate) fn extend(&self, key: &str, token: i64, deadline: Instant) -> bool {
        match self.state().held.get_mut(key) {
            Some(held) if held.0 == token => {
                held.1 = deadline;
                true
            }
            _ => false,
        }
    }

    /// Forgets a released grant.
    pub(crate) fn forget(&self, key: &str) {
        self.state().held.remove(key);
    }

    /// The orphans, and the grants whose deadline has passed unrenewed.
    fn take_orphans(&self) -> Vec<Orphan> {
        let mut state = self.state();
        let now = Instant::now();
        let mut orphans = std::mem::take(&mut state.orphans);
        state.held.retain(|key, (token, deadline)| {
            let keep = *deadline > now;
            if !keep {
                orphans.push(Orphan {
                    key: key.clone(),
                    mark: Mark::Token(*token),
                });
            }
            keep
        });
        orphans
    }

    /// Whether a keep-alive should go with the next request that relies on
    /// the lease: a lock granted on an older proof would be due for renewal
    /// at once.
    pub(crate) fn is_stale(&self) -> bool {
        self.proven().elapsed() >= self.renew_after()
    }

    /// How old a proof may be and still be relied on without a keep-alive.
    pub(crate) fn renew_after(&self) -> Duration {
        self.ttl / 3
    }

    /// Fit for new keys: alive as far as we know, and proven recently enough
    /// that a request sent now will surely find it. An older session is not
    /// refreshed but replaced: it only had keys nobody renews any more.
    fn is_usable(&self) -> bool {
        let state = self.state();
        !state.gone && state.proven.elapsed() < self.ttl / 2
    }

    /// Whether the lease may still exist as far as this client knows.
    fn may_live(&self) -> bool {
        let state = self.state();
        !state.gone && state.proven.elapsed() < self.ttl
    }

    pub(crate) fn add_orphan(&self, orphan: Orphan) {
        let mut state = self.state();
        if !state.gone {
            state.orphans.push(orphan);
        }
    }
}

/// The sessions of one client, and the connection they are granted and
/// kept alive on.
pub(crate) struct Sessions {
    core: Core,
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    /// The session new keys go on, per TTL in whole seconds.
    current: HashMap<i64, Arc<Session>>,
    /// Every session whose lease may still exist, by lease ID: a lock keeps
    /// renewing the session it was granted on even after new keys moved to
    /// another one.
    by_id: HashMap<i64, Arc<Session>>,
    /// One `LeaseGrant` at a time per TTL in whole seconds: acquires that
    /// find no session share the one in flight, and its failure.
    granting: HashMap<i64, SingleFlight<Arc<Session>>>,
}

impl Sessions {
    pub(crate) fn new(core: Core) -> Self {
        Self {
            core,
            registry: Mutex::default(),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn current(&self, seconds: i64) -> Option<Arc<Session>> {
        self.registry()
            .current
            .get(&seconds)
            .filter(|s| s.is_usable())
            .cloned()
    }

    /// A session this client granted, if its lease may still exist.
    pub(crate) fn by_id(&self, id: i64) -> Option<Arc<Session>> {
        self.registry()
            .by_id
            .get(&id)
            .filter(|s| s.may_live())
            .cloned()
    }

    /// Every session of this TTL whose lease may still exist.
    pub(crate) fn all_of(&self, ttl: Duration) -> Vec<Arc<Session>> {
        let seconds = lease_seconds(ttl);
        self.registry()
            .by_id
            .values()
            .filter(|s| s.ttl.as_secs() == seconds.unsigned_abs() && s.may_live())
            .cloned()
            .collect()
    }

    /// The grants of sessions of `seconds`, one at a time.
    fn granting(&self, seconds: i64) -> SingleFlight<Arc<Session>> {
        self.registry().granting.entry(seconds).or_default().clone()
    }

    fn insert(&self, seconds: i64, session: Arc<Session>) {
        let mut registry = self.registry();
        // Bounded: what goes is gone or expired on the server too.
        registry.by_id.retain(|_, s| s.may_live());
        registry.current.retain(|_, s| s.may_live());
        registry.by_id.insert(session.id, session.clone());
        registry.current.insert(seconds, session);
    }
}

const GRANT: &str = "grant a session lease";
const KEEP_ALIVE: &str = "keep the lease alive";

/// The most operations etcd takes in one `Txn` branch (its
/// `--max-txn-ops`, 128 by default), with room to spare.
const MAX_TXN_OPS: usize = 100;

/// Whole seconds, rounded up, as etcd grants leases.
pub(crate) fn lease_seconds(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).unwrap_or(i64::MAX)
}

impl Sessions {
    /// The session keys with this TTL go on: the current one, or a new
    /// lease (one `LeaseGrant`, shared with every caller that comes while
    /// it is in flight) if there is none fit for use.
    pub(crate) async fn session(self: &Arc<Self>, ttl: Duration) -> Result<Arc<Session>> {
        let seconds = lease_seconds(ttl);
        if let Some(session) = self.current(seconds) {
            return Ok(session);
        }
        let sessions = self.clone();
        self.granting(seconds)
            .run(GRANT, self.core.settings.timeout, move || async move {
                // Granted while this caller looked for the flight.
                match sessions.current(seconds) {
                    Some(session) => Ok(session),
                    None => sessions.grant_session(seconds).await,
                }
            })
            .await
    }

    /// A new session lease of `seconds`, current from now on.
    async fn grant_session(&self, seconds: i64) -> Result<Arc<Session>> {
        let sent = Instant::now();
        let granted = self
            .core
            .call(
                GRANT,
                |mut c| async move { c.lease_grant(seconds, None).await },
            )
            .await?;
        // etcd may grant more than asked (its minimum), never less; count
        // on what was asked.
        let granted_seconds = granted.ttl().clamp(0, seconds);
        let ttl = Duration::from_secs(granted_seconds.unsigned_abs());
        let session = Arc::new(Session::new(granted.id(), ttl, sent));
        self.insert(seconds, session.clone());
        Ok(session)
    }

    /// A keep-alive if `session` [is stale](Session::is_stale), sent by a
    /// request that will rely on the lease: `false` when it found the lease
    /// gone; `true` without a request otherwise.
    pub(crate) async fn prove_if_stale(&self, session: &Arc<Session>) -> Result<bool> {
        if session.is_stale() {
            self.prove_alive(session, session.renew_after()).await
        } else {
            Ok(true)
        }
    }

    /// Proves the session alive with a keep-alive, unless a proof younger
    /// than `fresh` is at hand; a keep-alive in flight is joined, not
    /// followed by another. `false` when the lease is gone; then so is
    /// every key on it. A keep-alive also starts the deletion of orphaned
    /// keys, in the background.
    pub(crate) async fn prove_alive(
        &self,
        session: &Arc<Session>,
        fresh: Duration,
    ) -> Result<bool> {
        if session.is_gone() {
            return Ok(false);
        }
        if session.proven().elapsed() < fresh {
            return Ok(true);
        }
        let (core, session) = (self.core.clone(), session.clone());
        let flight = session.flight.clone();
        flight
            .run(KEEP_ALIVE, self.core.settings.timeout, move || async move {
                clean_up(&core, &session);
                let sent = Instant::now();
                let alive = core.keep_alive(session.id).await?;
                if alive {
                    session.prove(sent);
                } else {
                    session.kill();
                }
                Ok(alive)
            })
            .await
    }

    /// Leaves the queue for an acquire that is given up, deleting every one
    /// of `keys` that `mark` still shows ours; if the server cannot be reached,
    /// the keys are left to the next keep-alive of every session they may
    /// be on (or to the lease's expiry).
    pub(crate) async fn leave_or_orphan(
        &self,
        keys: &[String],
        mark: &Mark,
        ttl: Duration,
    ) -> Result<()> {
        let left = self.core.leave_all(keys, mark).await;
        if left.is_err() {
            for key in keys {
                self.orphan(key, mark, ttl);
            }
        }
        left
    }

    /// Leaves `key` (ours while `mark` says so) to the next keep-alive of
    /// every session of `ttl` it may be on.
    pub(crate) fn orphan(&self, key: &str, mark: &Mark, ttl: Duration) {
        let orphan = Orphan {
            key: key.to_owned(),
            mark: mark.clone(),
        };
        for session in self.all_of(ttl) {
            session.add_orphan(orphan.clone());
        }
    }
}

/// Deletes the session's orphaned keys, and the keys of its grants
/// whose deadline passed unrenewed, in a task of their own: one `Txn`
/// per [`MAX_TXN_OPS`] keys. Those the server could not be told to
/// delete wait for the next keep-alive.
fn clean_up(core: &Core, session: &Arc<Session>) {
    let orphans = session.take_orphans();
    if !orphans.is_empty() {
        let keys: Vec<String> = orphans.iter().map(|o| shown(&o.key)).collect();
        tracing::debug!(?keys, "deleting orphaned and expired keys");
    }
    for chunk in orphans.chunks(MAX_TXN_OPS) {
        let (core, session, chunk) = (core.clone(), session.clone(), chunk.to_vec());
        tokio::spawn(async move {
            let deletes = chunk.iter().map(|o| (o.key.clone(), o.compare()));
            if let Err(e) = core.delete_each(deletes.collect()).await {
                tracing::debug!(error = %e, keys = chunk.len(), "orphaned queue keys are still there");
                for orphan in chunk {
                    session.add_orphan(orphan);
                }
            }
        });
    }
}

/// Whether a get of one key found it as the contender left it: created at
/// `created` (its token) and attached to the session lease `lease`. Anything
/// else — gone, or deleted and created again, or on another session — is
/// not our entry any more.
pub(crate) fn still_ours(got: &GetResponse, created: i64, lease: i64) -> bool {
    got.kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == created && kv.lease() == lease)
}
