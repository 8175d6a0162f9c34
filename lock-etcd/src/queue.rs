//! etcd's own lock protocol (the one behind `etcdctl lock` and the Go
//! client's `concurrency.Mutex`): a key per contender under the lock's
//! prefix, attached to its client's session lease; the lowest create
//! revision holds, every other watches the key just before its own.
//!
//! The same code serves the mutex's [`Line`] and both sides of a
//! read-write lock's; a semaphore's lease keys wait their own way
//! (`semaphore_wait.rs`). A line names our key and the
//! range of keys that keep us waiting while one older than ours is there.
//!
//! [`Queue`] holds what the protocol needs of one backend; the semaphore's
//! permits (`semaphore.rs`), the acquire (`acquire.rs`) and the holders
//! (`holders.rs`) build on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use lock_core::backend::{AcquireRequest, Lease, WaitBudget};
use lock_core::{Error, FencingToken, Result};

use crate::catch_up::{looks_in_line_of, watched_or_looked};
use crate::client::Core;
use crate::error::lease_not_found;
use crate::handover::{EtcdHandovers, PermitHandovers, Waiter};
use crate::layout::{Layout, Line};
use crate::mark::Mark;
use crate::session::{Session, Sessions, still_ours};
use crate::shared_watch::{SharedWatches, Subscription};

/// The lock queues of one backend: its connection, its key names, the
/// session leases its keys go on, its waiters a release can grant directly
/// (a mutex's or a writer's, and a semaphore's first waiters), and how many
/// watch events woke one. Cheap to clone; clones share all of it.
#[derive(Clone)]
pub(crate) struct Queue {
    pub(crate) core: Core,
    pub(crate) layout: Layout,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) handovers: Arc<EtcdHandovers>,
    pub(crate) permit_handovers: Arc<PermitHandovers>,
    pub(crate) shared_watches: Arc<SharedWatches>,
    pub(crate) wakeups: Arc<AtomicU64>,
}

/// Where one contender stands in a lock's queue.
pub(crate) struct Place {
    pub(crate) revision: i64,
    pub(crate) ahead: Ahead,
}

/// Who is ahead of us in the queue, as far as we know.
pub(crate) enum Ahead {
    Nobody,
    /// The key just before ours, the revision of the read that found it,
    /// and how many keys the line held then (ours and any behind it too).
    Key(Vec<u8>, i64, i64),
    /// Somebody: read the queue to find whom.
    Unknown,
}

/// A session turned out gone, or our key was on an older one (and has been
/// deleted): queue again on a current session.
pub(crate) struct Requeue;

impl Queue {
    pub(crate) fn new(core: Core) -> Self {
        Self {
            layout: Layout::new(&core.settings.prefix),
            sessions: Arc::new(Sessions::new(core.clone())),
            core,
            handovers: Arc::default(),
            permit_handovers: Arc::default(),
            shared_watches: Arc::default(),
            wakeups: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Joins `line` for `req` on `session`: one `Txn` that puts our key
    /// unless it is there already, and reads the keys just ahead of it. A
    /// session found stale gets a keep-alive sent at the same time, so the
    /// grant can count on a proof as recent as the `Txn`.
    pub(crate) async fn enqueue(
        &self,
        req: &AcquireRequest,
        line: &Line,
        session: &Arc<Session>,
    ) -> Result<std::result::Result<Place, Requeue>> {
        let key = line.key.clone();
        let dir = line.blockers.clone();
        let mark = Mark::of(req);
        // Put in the same transaction, our key is the newest of all: the
        // newest blocker other than ours is the one ahead of us.
        let newest = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2)
            .with_keys_only();
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    crate::layout::value(req),
                    Some(PutOptions::new().with_lease(session.id)),
                ),
                TxnOp::get(dir.clone(), Some(newest)),
            ])
            .or_else([TxnOp::get(key.clone(), None), TxnOp::get(dir, Some(first))]);
        let keep_alive = self.sessions.prove_if_stale(session);
        let put = self.core.call("enqueue", |mut c| async move {
            match c.txn(txn).await {
                // The session's lease is gone.
                Err(e) if lease_not_found(&e) => Ok(None),
                other => other.map(Some),
            }
        });
        let (alive, response) = tokio::join!(keep_alive, put);
        if let Ok(false) = alive {
            // Our key, put or not, went with the lease.
            return Ok(Err(Requeue));
        }
        let Some(response) = response? else {
            session.kill();
            return Ok(Err(Requeue));
        };
        let place = if response.succeeded() {
            put_place(&response, &key)?
        } else {
            let ops = response.op_responses();
            let (Some(TxnOpResponse::Get(mine)), Some(TxnOpResponse::Get(head))) =
                (ops.first(), ops.get(1))
            else {
                return Err(unexpected());
            };
            let Some(kv) = mine.kvs().first() else {
                return Err(unexpected());
            };
            if !mark.owns(kv.value()) {
                return Err(Error::backend(format!(
                    "the queue key {} belongs to another owner",
                    crate::layout::shown(&key)
                )));
            }
            if kv.lease() != session.id {
                // Put by an earlier attempt on a session since replaced.
                self.core.leave(&key, &mark).await?;
                return Ok(Err(Requeue));
            }
            let revision = kv.create_revision();
            let oldest = head.kvs().first().map(|kv| kv.create_revision());
            Place {
                revision,
                ahead: if oldest.is_none_or(|oldest| oldest >= revision) {
                    Ahead::Nobody
                } else {
                    Ahead::Unknown
                },
            }
        };
        if session.is_gone() {
            return Ok(Err(Requeue));
        }
        Ok(Ok(place))
    }

    /// Waits until every blocker created before our key is gone, waiting
    /// for the deletion of only the one just before ours each time, and
    /// checks with the read that finds nobody ahead any more that our own
    /// key survived the wait.
    ///
    /// The deletions come from the backend's shared watch of the lock
    /// (`shared_watch.rs`), which starts from the present: etcd serves a
    /// watch that starts at a past revision from its catch-up loop, which
    /// runs every 100 ms, so under churn a waiter would learn of its turn
    /// that much later. When that watch began after the read that named the
    /// key, a read made once we wait on it tells whether the key went
    /// before; none is needed when the watch vouches for every deletion
    /// since that read.
    pub(crate) async fn wait_for_turn(
        &self,
        req: &AcquireRequest,
        line: &Line,
        place: &Place,
        session: &Arc<Session>,
        budget: &WaitBudget,
    ) -> Result<()> {
        let mut to_watch = match &place.ahead {
            Ahead::Nobody => return Ok(()),
            Ahead::Key(key, known_at, queued) => Some((key.clone(), *known_at, *queued)),
            Ahead::Unknown => None,
        };
        let range = self.layout.family_dir(&req.name, req.kind.family());
        loop {
            let mut queued = 0;
            let watching = match to_watch.take() {
                Some((key, known_at, in_line)) => {
                    queued = in_line;
                    let subscribed = self
                        .shared_watches
                        .subscribe(&self.core, &range, &key, known_at);
                    let Some(subscribed) = budget.race(subscribed).await else {
                        return Err(budget.exhausted(&req.name));
                    };
                    let (stream, in_step) = subscribed?;
                    if in_step {
                        Some((key, stream))
                    } else {
                        let watching = Some((key, stream));
                        self.recheck(req, line, place, session, watching, &mut to_watch)
                            .await?
                    }
                }
                None => {
                    self.recheck(req, line, place, session, None, &mut to_watch)
                        .await?
                }
            };
            let Some((watched, mut stream)) = watching else {
                if to_watch.is_none() {
                    return Ok(()); // nobody ahead
                }
                continue;
            };
            // A release of this backend may hand the lock over (see
            // `handover.rs`); a key that is not UTF-8 is none of ours.
            let registration = std::str::from_utf8(&watched).ok().map(|watched| {
                let waiter = Waiter {
                    key: line.key.clone(),
                    revision: place.revision,
                    session: session.id,
                };
                self.handovers.register(watched, waiter, budget)
            });
            let watch = (watched.as_slice(), &mut stream, queued);
            let gone = self.predecessor_gone(req, line, place, session, watch);
            match budget.race(gone).await {
                None => return Err(budget.exhausted(&req.name)),
                Some(Err(e)) if e.is_retryable() && !budget.is_over() => {
                    tracing::debug!(error = %e, "watch failed; looking for the predecessor again");
                }
                Some(outcome) => {
                    let looked = outcome?;
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                    if let Some(registration) = registration {
                        let handed = budget.race(registration.handed_over()).await;
                        if handed == Some(Some(())) && !session.is_stale() && !session.is_gone() {
                            return Ok(());
                        }
                    }
                    // Not handed over: what a look found stands (it made
                    // the read's checks); after an event the loop reads.
                    budget.attempted();
                    match looked {
                        Some(Ahead::Nobody) => return Ok(()),
                        Some(Ahead::Key(key, known_at, queued)) => {
                            to_watch = Some((key, known_at, queued));
                        }
                        Some(Ahead::Unknown) | None => {}
                    }
                }
            }
        }
    }

    /// Completes when the key `watched`, just ahead of ours in a line of
    /// `queued` keys, is gone: by its delete event (`None`), or by a look at
    /// the queue that finds another key ahead, or none, which it answers
    /// (see `catch_up.rs`).
    async fn predecessor_gone(
        &self,
        req: &AcquireRequest,
        line: &Line,
        place: &Place,
        session: &Arc<Session>,
        (watched, stream, queued): (&[u8], &mut Subscription, i64),
    ) -> Result<Option<Ahead>> {
        let look = || async move {
            let ahead = self.look_ahead(req, line, place, session).await?;
            Ok(match ahead {
                Ahead::Key(key, _, _) if key == watched => None,
                other => Some(Some(other)),
            })
        };
        let event = async { stream.deleted().await.map(|()| None) };
        watched_or_looked(event, look, looks_in_line_of(queued)).await
    }

    /// Reads who is ahead now: keeps `watching` if that is still the key
    /// just before ours, else drops it and names the key to watch next in
    /// `to_watch`. Neither: nobody is ahead.
    async fn recheck(
        &self,
        req: &AcquireRequest,
        line: &Line,
        place: &Place,
        session: &Arc<Session>,
        watching: Option<(Vec<u8>, Subscription)>,
        to_watch: &mut Option<(Vec<u8>, i64, i64)>,
    ) -> Result<Option<(Vec<u8>, Subscription)>> {
        match self.look_ahead(req, line, place, session).await? {
            Ahead::Key(key, known_at, queued) => match watching {
                Some((watched, stream)) if watched == key => Ok(Some((watched, stream))),
                _ => {
                    *to_watch = Some((key, known_at, queued));
                    Ok(None)
                }
            },
            _ => Ok(None),
        }
    }

    /// One `Txn` reading the blocker just before ours and our own key: Jepsen
    /// found etcd 3.4.3's lock granting waiters whose lease had expired
    /// while they waited, so ours must still be there, on our session. A
    /// keep-alive goes with it if the session's proof is getting old.
    async fn look_ahead(
        &self,
        req: &AcquireRequest,
        line: &Line,
        place: &Place,
        session: &Arc<Session>,
    ) -> Result<Ahead> {
        let before_us = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(place.revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let txn = Txn::new().and_then([
            TxnOp::get(line.blockers.as_str(), Some(before_us)),
            TxnOp::get(line.key.as_str(), None),
        ]);
        let keep_alive = self.sessions.prove_if_stale(session);
        let read = self
            .core
            .call("look ahead", |mut c| async move { c.txn(txn).await });
        let (alive, response) = tokio::join!(keep_alive, read);
        let response = response?;
        let ops = response.op_responses();
        let (Some(TxnOpResponse::Get(ahead)), Some(TxnOpResponse::Get(mine))) =
            (ops.first(), ops.get(1))
        else {
            return Err(unexpected());
        };
        if !still_ours(mine, place.revision, session.id)
            || matches!(alive, Ok(false))
            || session.is_gone()
        {
            return Err(Error::not_held(&req.name));
        }
        Ok(match ahead.kvs().first() {
            Some(kv) => Ahead::Key(kv.key().to_vec(), revision(&response), ahead.count()),
            None => Ahead::Nobody,
        })
    }

    /// Keeps `session` alive while its owner waits in the queue; stops
    /// when dropped. Every waiter on the session runs one; they share the
    /// keep-alives.
    pub(crate) fn keep_queued(&self, session: &Arc<Session>) -> Keeper {
        let sessions = self.sessions.clone();
        let session = session.clone();
        Keeper(tokio::spawn(async move {
            let retry_after = session.ttl / 10;
            loop {
                tokio::time::sleep_until(session.proven() + session.renew_after()).await;
                match sessions.prove_alive(&session, session.renew_after()).await {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => {
                        tracing::debug!(error = %e, "keeping a queued session alive failed");
                        tokio::time::sleep(retry_after).await;
                    }
                }
            }
        }))
    }

    /// The grant of our `key`, whose create `revision` is its fencing
    /// token: its deadline counts from the session's proof, and it carries
    /// the session's lease ID for its renewals.
    pub(crate) fn lease_for(
        &self,
        req: &AcquireRequest,
        key: &str,
        revision: i64,
        session: &Session,
    ) -> Lease {
        let token = FencingToken::from_i64(revision);
        let lease =
            Lease::granted(req, token, session.proven()).with_version(session.id.unsigned_abs());
        session.hold(key, revision, lease.deadline());
        lease
    }
}

/// A waiter's session keeper; aborted when dropped.
pub(crate) struct Keeper(tokio::task::JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Our place from the `Txn` that put our key: it is the newest key of
/// all, so the newest blocker other than ours (if any) is just ahead of us.
fn put_place(response: &TxnResponse, key: &str) -> Result<Place> {
    let ops = response.op_responses();
    let (Some(TxnOpResponse::Put(put)), Some(TxnOpResponse::Get(newest))) =
        (ops.first(), ops.get(1))
    else {
        return Err(unexpected());
    };
    let revision = put.header().map_or(0, |h| h.revision());
    let kvs = newest.kvs();
    if kvs.iter().any(|kv| {
        kv.create_revision() > revision
            || (kv.create_revision() == revision) != (kv.key() == key.as_bytes())
    }) {
        return Err(unexpected());
    }
    Ok(Place {
        revision,
        ahead: match kvs.iter().find(|kv| kv.create_revision() < revision) {
            Some(kv) => Ahead::Key(kv.key().to_vec(), revision, newest.count()),
            None => Ahead::Nobody,
        },
    })
}

/// The store's revision when it answered `response`.
pub(crate) fn revision(response: &TxnResponse) -> i64 {
    response.header().map_or(0, |h| h.revision())
}

pub(crate) fn unexpected() -> Error {
    Error::backend("etcd answered a queue transaction without the expected keys")
}
