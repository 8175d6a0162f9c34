//! The Redlock majority: connecting to every master in the background,
//! running one call on all of them at once, and judging whether enough
//! answered.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::RedlockConfig;
use futures_util::future::join_all;
use lock_core::backend::OwnerToken;
use lock_core::backend::{AcquireRequest, Backoff, Lease};
use lock_core::{Error, LockKind, LockName, Result};
use lock_redis::node::{Keys, Node, NodeHolder, mutex_like};
use redis::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One master, connected by a task of its own (see [`keep_connecting`]):
/// a master that is down, or slow to connect (a TLS handshake, a long
/// link), when the backend starts neither holds the backend up nor makes
/// any call wait for a connection. Once connected, the node reconnects by
/// itself.
#[derive(Debug)]
pub(crate) struct Member {
    label: String,
    node: OnceLock<Node>,
    /// Why the last connection attempt failed, for error messages, and
    /// whether trying again could help.
    failure: Mutex<Option<(String, bool)>>,
}

impl Member {
    /// The node, or at once an error saying it is not connected yet.
    fn node(&self) -> Result<&Node> {
        self.node.get().ok_or_else(|| {
            Error::unavailable(
                crate::NAME,
                match self.failure() {
                    Some(why) => format!("{} is not connected: {why}", self.label),
                    None => format!("{} is still connecting", self.label),
                },
            )
        })
    }

    /// Why the last connection attempt failed, while not connected.
    fn failure(&self) -> Option<String> {
        self.last_failure().map(|(why, _)| why)
    }

    /// Why the last connection attempt failed, if no retry can help (a
    /// refused password, a server too old), while not connected.
    fn refusal(&self) -> Option<String> {
        self.last_failure()
            .and_then(|(why, retryable)| (!retryable).then_some(why))
    }

    fn last_failure(&self) -> Option<(String, bool)> {
        if self.node.get().is_some() {
            return None;
        }
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record_failure(&self, e: &Error) {
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((e.to_string(), e.is_retryable()));
    }
}

/// How a member reaches its master: a `redis::Client` (made from a master
/// of a [`RedlockConfig`], or the application's), with the config's
/// timeouts and eviction choice.
#[derive(Clone)]
pub(crate) struct Reach(Box<(Client, Arc<RedlockConfig>)>);

impl Reach {
    /// A master reached through `client` with `config`'s options.
    pub(crate) fn new(client: Client, config: Arc<RedlockConfig>) -> Self {
        Self(Box::new((client, config)))
    }

    async fn connect(&self, label: &str, keys: Keys) -> Result<Node> {
        let (client, common) = &*self.0;
        Node::with_client(
            client.clone(),
            label.to_owned(),
            common.timeout,
            common.connect_timeout,
            common.allow_eviction,
            keys,
        )
        .await
    }
}

/// The longest pause between two connection attempts to one master.
const RETRY_CAP: Duration = Duration::from_secs(2);

/// The pause before asking again a master that refused the connection for
/// good (a wrong password, a certificate it does not trust).
const REFUSED_RETRY: Duration = Duration::from_secs(30);

/// How far the members' connection tasks have got.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Members whose first attempt has ended, either way.
    tried: usize,
    /// Members connected.
    connected: usize,
}

/// The masters and the rule that a majority of them decides: every call
/// runs on all of them at once, each bounded on its own.
#[derive(Debug)]
pub(crate) struct Majority {
    members: Vec<Arc<Member>>,
    /// The members' connection tasks, stopped with the majority.
    connecting: Vec<JoinHandle<()>>,
    quorum: usize,
    node_timeout: Duration,
}

/// What every node answered to one call.
pub(crate) struct Answers<T> {
    pub(crate) ok: Vec<T>,
    pub(crate) failed: Vec<Error>,
}

impl<T> Answers<T> {
    /// The answers, split from the outcomes of one call on each node.
    pub(crate) fn of(outcomes: impl IntoIterator<Item = Result<T>>) -> Self {
        let mut answers = Answers {
            ok: Vec::new(),
            failed: Vec::new(),
        };
        for outcome in outcomes {
            match outcome {
                Ok(v) => answers.ok.push(v),
                Err(e) => answers.failed.push(e),
            }
        }
        answers
    }
}

/// Connects `member` to its master, each attempt bounded by the connect
/// timeout (and its checks by the command timeout), never by the far
/// shorter per-call limit; tries again until it succeeds or the backend is
/// dropped, and reports to `progress`.
async fn keep_connecting(
    member: Arc<Member>,
    reach: Reach,
    keys: Keys,
    progress: watch::Sender<Progress>,
) {
    let mut backoff = Backoff::with_cap(RETRY_CAP);
    let mut attempts = 0u32;
    loop {
        match reach.connect(&member.label, keys.clone()).await {
            Ok(node) => {
                if attempts > 0 {
                    tracing::info!(server = member.label, attempts, "redlock node connected");
                }
                let _ = member.node.set(node);
                progress.send_modify(|p| {
                    p.tried += usize::from(attempts == 0);
                    p.connected += 1;
                });
                return;
            }
            Err(e) => {
                let refused = !e.is_retryable();
                if attempts == 0 || refused {
                    tracing::warn!(server = member.label, error = %e, "redlock node not connected; trying again in the background");
                } else {
                    tracing::debug!(server = member.label, error = %e, "redlock node still not connected");
                }
                member.record_failure(&e);
                if attempts == 0 {
                    progress.send_modify(|p| p.tried += 1);
                }
                attempts += 1;
                // A refusal (a wrong password) comes back until somebody
                // changes the master's configuration: asked far less often,
                // it fills no server's log, and each time it is said.
                let nap = if refused {
                    REFUSED_RETRY
                } else {
                    backoff.next_nap()
                };
                tokio::time::sleep(nap).await;
            }
        }
    }
}

impl Majority {
    /// Connects to each master in the background; waits for the first
    /// attempt on every one, at most as long as one attempt may take, and
    /// fails unless a majority is then connected.
    pub(crate) async fn start(
        masters: Vec<(String, Reach)>,
        common: &RedlockConfig,
    ) -> Result<Self> {
        let quorum = masters.len() / 2 + 1;
        let keys = Keys::new(common.prefix.clone()).without_waiting_mark();
        let (progress, mut watch_progress) = watch::channel(Progress::default());
        let mut members = Vec::with_capacity(masters.len());
        let mut connecting = Vec::with_capacity(masters.len());
        for (label, reach) in masters {
            let member = Arc::new(Member {
                label,
                node: OnceLock::new(),
                failure: Mutex::new(None),
            });
            connecting.push(tokio::spawn(keep_connecting(
                member.clone(),
                reach,
                keys.clone(),
                progress.clone(),
            )));
            members.push(member);
        }
        let majority = Self {
            quorum,
            node_timeout: common.timeout,
            members,
            connecting,
        };
        // Connecting, then `INFO` and perhaps `CONFIG GET`.
        let limit = common.connect_timeout + common.timeout * 2;
        let everyone = majority.members.len();
        let _ = tokio::time::timeout(limit, watch_progress.wait_for(|p| p.tried == everyone)).await;
        let connected = watch_progress.borrow().connected;
        let refusals: Vec<_> = majority
            .members
            .iter()
            .filter_map(|m| m.refusal())
            .collect();
        if everyone - refusals.len() < majority.quorum {
            // Waiting for those nodes would not help: say so, not
            // "unavailable".
            return Err(Error::backend(format!(
                "connect: {} of {everyone} nodes refused the connection, and Redlock needs {}; \
                 first refusal: {}",
                refusals.len(),
                majority.quorum,
                refusals[0]
            )));
        }
        if connected < majority.quorum {
            let first_failure = majority.members.iter().find_map(|m| m.failure());
            return Err(majority.no_quorum("connect", connected, first_failure, limit));
        }
        Ok(majority)
    }

    /// The number of masters.
    pub(crate) fn nodes(&self) -> usize {
        self.members.len()
    }

    /// How many masters make a majority.
    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    /// The masters, in the order calls report their outcomes.
    pub(crate) fn members(&self) -> &[Arc<Member>] {
        &self.members
    }

    /// How long one call to one node may take at most.
    pub(crate) fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// How long one call to one node may take for a lease of `ttl`: far
    /// below the TTL, so slow nodes cannot eat the lease's validity.
    pub(crate) fn node_limit(&self, ttl: Duration) -> Duration {
        self.node_timeout
            .min(ttl / 10)
            .max(Duration::from_millis(1))
    }

    /// Runs `op` on every node at once, each bounded by `limit`.
    pub(crate) async fn on_every<'a, T, F, Fut>(&'a self, limit: Duration, op: F) -> Answers<T>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        Answers::of(self.on_members(self.members.iter(), limit, op).await)
    }

    /// Runs `op` on each of `members` at once, each bounded by `limit`;
    /// the outcomes in the members' order.
    pub(crate) async fn on_members<'a, T, F, Fut>(
        &'a self,
        members: impl Iterator<Item = &'a Arc<Member>>,
        limit: Duration,
        op: F,
    ) -> Vec<Result<T>>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let calls = members.map(|m| {
            let op = &op;
            async move {
                tokio::time::timeout(limit, op(m.node()?))
                    .await
                    .unwrap_or(Err(Error::timeout("a call to one Redlock node", limit)))
            }
        });
        join_all(calls).await
    }

    pub(crate) fn no_quorum(
        &self,
        operation: &str,
        answered: usize,
        first_failure: Option<String>,
        limit: Duration,
    ) -> Error {
        let first = first_failure
            .map(|e| format!("; first failure: {e}"))
            .unwrap_or_default();
        Error::unavailable(
            crate::NAME,
            format!(
                "{operation}: only {answered} of {} nodes answered within {limit:?}, and Redlock needs {}{first}",
                self.members.len(),
                self.quorum
            ),
        )
    }

    pub(crate) fn no_answer_quorum<T>(
        &self,
        operation: &str,
        answers: &Answers<T>,
        limit: Duration,
    ) -> Error {
        let first = answers.failed.first().map(ToString::to_string);
        self.no_quorum(operation, answers.ok.len(), first, limit)
    }

    /// The holder of `kind`'s lock of `name` on each master, where a
    /// majority of masters have the same one by `same`: those masters'
    /// answers, or none if no majority agrees. Too few answers is an
    /// error.
    pub(crate) async fn agreed_holder(
        &self,
        name: &LockName,
        kind: LockKind,
        same: impl Fn(&NodeHolder, &NodeHolder) -> bool,
    ) -> Result<Vec<NodeHolder>> {
        let limit = self.node_timeout;
        let answers = self.on_every(limit, |n| n.holder(name, kind)).await;
        if answers.ok.len() < self.quorum {
            return Err(self.no_answer_quorum("holder", &answers, limit));
        }
        let held: Vec<NodeHolder> = answers.ok.into_iter().flatten().collect();
        let agreeing = |h: &NodeHolder| held.iter().filter(|o| same(h, o)).count();
        let Some(one) = held.iter().position(|h| agreeing(h) >= self.quorum) else {
            return Ok(Vec::new());
        };
        let keep: Vec<bool> = held.iter().map(|o| same(&held[one], o)).collect();
        Ok(held
            .into_iter()
            .zip(keep)
            .filter_map(|(h, kept)| kept.then_some(h))
            .collect())
    }

    /// Whether a call that started at `sent` left any validity of `ttl`.
    pub(crate) fn still_valid(sent: Instant, ttl: Duration) -> bool {
        let drift = ttl.mul_f64(Lease::DRIFT_FACTOR) + Lease::DRIFT_FLOOR;
        sent.elapsed() + drift < ttl
    }

    /// Deletes `name` on every node where `owner` holds it, including the
    /// nodes that seemed to fail: their reply may have been lost after the
    /// write was applied.
    /// Gives back whatever `req`'s attempt may hold on `members`.
    pub(crate) async fn release_on_members<'a>(
        &'a self,
        members: impl Iterator<Item = &'a Arc<Member>>,
        req: &AcquireRequest,
        limit: Duration,
    ) {
        self.on_members(members, limit, |n| {
            release_on(n, &req.name, req.kind, req.owner)
        })
        .await;
    }

    pub(crate) async fn release_everywhere(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        limit: Duration,
    ) -> Answers<bool> {
        self.on_every(limit, |n| release_on(n, name, kind, owner))
            .await
    }
}

/// One node's part of a renewal. A group member is checked by its owner
/// only: each node drew its own token for the grant.
pub(crate) async fn renew_on(n: &Node, lease: &Lease, ttl: Duration) -> Result<bool> {
    match lease.kind() {
        kind if mutex_like(kind) => n.renew(lease, ttl).await,
        _ => n.renew_member(lease, None, ttl).await,
    }
}

/// Whether one node holds `lease`'s grant.
pub(crate) async fn holds_on(n: &Node, lease: &Lease) -> Result<bool> {
    match lease.kind() {
        kind if mutex_like(kind) => n.holds(lease.name(), kind, lease.owner()).await,
        _ => n.holds_member(lease, None).await,
    }
}

/// One node's part of a release (or an abandon: everything `owner` has).
async fn release_on(n: &Node, name: &LockName, kind: LockKind, owner: OwnerToken) -> Result<bool> {
    match kind {
        kind if mutex_like(kind) => n.release(name, kind, owner).await,
        _ => Ok(n.leave(name, kind, owner, None, false).await?.live),
    }
}

impl Drop for Majority {
    fn drop(&mut self) {
        for task in &self.connecting {
            task.abort();
        }
    }
}
