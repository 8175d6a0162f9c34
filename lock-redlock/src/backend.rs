//! [`RedlockBackend`]: the Redlock algorithm over independent Redis masters.

use std::future::Future;
use std::time::Duration;

use futures_util::future::join_all;
use lock_core::wait::{Backoff, ReleaseSignals, poll_acquire_with};
use lock_core::{
    AcquireRequest, Capabilities, Error, Fencing, FencingToken, Holder, Lease, LockBackend,
    LockName, Result, WaitBudget, async_trait,
};
use lock_redis::config::NodeConfig;
use lock_redis::node::{Keys, Node};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::config::RedlockConfig;

/// One master. It connects on first use, so a node that is down when the
/// backend starts does not stop a majority from working; once connected it
/// reconnects by itself.
#[derive(Debug)]
struct Member {
    config: NodeConfig,
    keys: Keys,
    node: OnceCell<Node>,
}

impl Member {
    async fn node(&self) -> Result<&Node> {
        self.node
            .get_or_try_init(|| Node::connect(&self.config, self.keys.clone()))
            .await
    }
}

/// What every node answered to one call.
struct Answers<T> {
    ok: Vec<T>,
    failed: Vec<Error>,
}

/// Redlock over N independent masters (see the crate docs).
#[derive(Debug)]
pub struct RedlockBackend {
    members: Vec<Member>,
    quorum: usize,
    node_timeout: Duration,
    retry_delay: Duration,
    signals: ReleaseSignals,
}

impl RedlockBackend {
    /// Connects to the masters a `redlock://` URL lists. Fails unless a
    /// majority can be reached now; the others are tried again on use.
    pub async fn connect(url: &str) -> Result<Self> {
        let config = RedlockConfig::parse(url)?;
        let keys = Keys::new(config.common.prefix.clone());
        let backend = Self {
            quorum: config.quorum(),
            node_timeout: config.common.timeout,
            retry_delay: config.retry_delay,
            members: config
                .nodes
                .into_iter()
                .map(|config| Member {
                    config,
                    keys: keys.clone(),
                    node: OnceCell::new(),
                })
                .collect(),
            signals: ReleaseSignals::new(),
        };
        let connected = backend
            .on_every(config.common.connect_timeout, |_| async { Ok(()) })
            .await;
        if connected.ok.len() < backend.quorum {
            return Err(backend.no_quorum("connect", &connected, config.common.connect_timeout));
        }
        Ok(backend)
    }

    /// The number of masters.
    pub fn nodes(&self) -> usize {
        self.members.len()
    }

    /// How long one call to one node may take for a lease of `ttl`: far
    /// below the TTL, so slow nodes cannot eat the lease's validity.
    fn node_limit(&self, ttl: Duration) -> Duration {
        self.node_timeout
            .min(ttl / 10)
            .max(Duration::from_millis(1))
    }

    /// Runs `op` on every node at once, each bounded by `limit`.
    async fn on_every<'a, T, F, Fut>(&'a self, limit: Duration, op: F) -> Answers<T>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let calls = self.members.iter().map(|m| {
            let op = &op;
            async move {
                let call = async { op(m.node().await?).await };
                tokio::time::timeout(limit, call)
                    .await
                    .unwrap_or(Err(Error::Timeout {
                        operation: "a call to one Redlock node",
                        after: limit,
                    }))
            }
        });
        let mut answers = Answers {
            ok: Vec::new(),
            failed: Vec::new(),
        };
        for result in join_all(calls).await {
            match result {
                Ok(v) => answers.ok.push(v),
                Err(e) => answers.failed.push(e),
            }
        }
        answers
    }

    fn no_quorum<T>(&self, operation: &str, answers: &Answers<T>, limit: Duration) -> Error {
        let first = answers
            .failed
            .first()
            .map(|e| format!("; first failure: {e}"))
            .unwrap_or_default();
        Error::Unavailable {
            backend: "redlock",
            message: format!(
                "{operation}: only {} of {} nodes answered within {limit:?}, and Redlock needs {}{first}",
                answers.ok.len(),
                self.members.len(),
                self.quorum
            ),
            source: None,
        }
    }

    /// Whether a call that started at `sent` left any validity of `ttl`.
    fn still_valid(sent: Instant, ttl: Duration) -> bool {
        let drift = ttl.mul_f64(Lease::DRIFT_FACTOR) + Lease::DRIFT_FLOOR;
        sent.elapsed() + drift < ttl
    }

    /// Deletes `name` on every node where `owner` holds it, including the
    /// nodes that seemed to fail: their reply may have been lost after the
    /// write was applied.
    async fn release_everywhere(
        &self,
        name: &LockName,
        owner: lock_core::OwnerToken,
        limit: Duration,
    ) -> Answers<bool> {
        self.on_every(limit, |n| n.release(name, owner)).await
    }
}

#[async_trait]
impl LockBackend for RedlockBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new("redlock", Fencing::BestEffort)
            .with_survives_node_loss(true)
            .with_ttl_range(self.node_timeout * 2, Capabilities::DEFAULT_MAX_TTL)
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let limit = self.node_limit(req.ttl);
        let sent = Instant::now();
        let answers = self
            .on_every(limit, |n| n.acquire(&req.name, req.owner, req.ttl))
            .await;
        let tokens: Vec<FencingToken> = answers.ok.iter().flatten().copied().collect();
        if tokens.len() >= self.quorum && Self::still_valid(sent, req.ttl) {
            let token = tokens.iter().copied().max().unwrap_or(FencingToken(0));
            return Ok(Some(Lease::new(
                req.name.clone(),
                req.owner,
                token,
                req.ttl,
                sent,
            )));
        }
        self.release_everywhere(&req.name, req.owner, limit).await;
        if answers.ok.len() < self.quorum {
            return Err(self.no_quorum("acquire", &answers, limit));
        }
        if tokens.len() >= self.quorum {
            return Err(Error::Timeout {
                operation: "acquire on a majority before the lease's validity ran out",
                after: sent.elapsed(),
            });
        }
        Ok(None)
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire_with(
            self,
            req,
            budget,
            Some(&self.signals),
            Backoff::with_cap(self.retry_delay),
        )
        .await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let limit = self.node_limit(ttl);
        let sent = Instant::now();
        let answers = self
            .on_every(limit, |n| n.renew(lease.name(), lease.owner(), ttl))
            .await;
        let extended = answers.ok.iter().filter(|e| **e).count();
        let refused = answers.ok.len() - extended;
        if extended >= self.quorum && Self::still_valid(sent, ttl) {
            return Ok(lease.renewed(ttl, sent));
        }
        if refused > self.members.len() - self.quorum {
            return Err(Error::NotHeld {
                name: lease.name().to_string(),
            });
        }
        Err(self.no_quorum("renew", &answers, limit))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let limit = self.node_limit(lease.ttl());
        let answers = self
            .release_everywhere(lease.name(), lease.owner(), limit)
            .await;
        self.signals.notify(lease.name());
        let deleted = answers.ok.iter().filter(|d| **d).count();
        if deleted >= self.quorum {
            Ok(())
        } else if answers.ok.len() < self.quorum {
            Err(self.no_quorum("release", &answers, limit))
        } else {
            Err(Error::NotHeld {
                name: lease.name().to_string(),
            })
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.release_everywhere(&req.name, req.owner, self.node_limit(req.ttl))
            .await;
        self.signals.notify(&req.name);
        Ok(())
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let answers = self.on_every(self.node_timeout, |n| n.holder(name)).await;
        if answers.ok.len() < self.quorum {
            return Err(self.no_quorum("holder", &answers, self.node_timeout));
        }
        let held: Vec<_> = answers.ok.into_iter().flatten().collect();
        // The holder is whoever holds the key on a majority, if anybody does.
        let Some(owner) = held
            .iter()
            .map(|h| &h.owner)
            .find(|o| held.iter().filter(|h| &h.owner == *o).count() >= self.quorum)
        else {
            return Ok(None);
        };
        let same: Vec<_> = held.iter().filter(|h| &h.owner == owner).collect();
        Ok(Some(Holder {
            owner: owner.chars().take(8).collect(),
            token: FencingToken(same.iter().map(|h| h.counter).max().unwrap_or(0)),
            expires_in: same.iter().map(|h| h.remaining).min(),
        }))
    }
}
