//! [`RedlockBackend`]: the Redlock algorithm over independent Redis masters.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Family;
use lock_core::backend::{
    AcquireRequest, BackendStats, Holder, Leader, Lease, LockBackend, ReleaseSignals, WaitBudget,
    Waking, async_trait, poll_acquire,
};
use lock_core::{Capabilities, Error, Fencing, LockKind, LockName, Result};
use tokio::time::Instant;

use lock_redis::node::Node;
use redis::Client;

use crate::RedlockConfig;
use crate::config::check_masters;
use crate::election;
use crate::grant::grant_on;
use crate::majority::{Majority, Reach, holds_on, renew_on};

/// Redlock over N independent masters (see the crate docs).
#[derive(Debug)]
pub struct RedlockBackend {
    majority: Majority,
    retry_delay: Duration,
    signals: ReleaseSignals,
    /// This process's observers of elections, woken by its own changes
    /// (others' are polled).
    observers: ReleaseSignals,
}

impl RedlockBackend {
    /// Connects to the masters a `redlock://` URL lists, each in the
    /// background. Waits for the first attempt on every master, at most as
    /// long as one attempt may take, and fails unless a majority is then
    /// connected; the masters not connected keep being tried.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(RedlockConfig::from_url(url)?).await
    }

    /// Connects to the masters `config` names, once it passed its checks;
    /// see [`connect`](Self::connect).
    pub async fn connect_with(config: RedlockConfig) -> Result<Self> {
        config.check()?;
        // The clients are made here, so that a TLS file that cannot be read
        // fails the connect at once rather than every attempt in the
        // background.
        let clients = config
            .masters
            .iter()
            .map(|master| {
                let client = master.client(&config.tls).map_err(|e| match e {
                    Error::InvalidConfig { reason, .. } => {
                        Error::invalid_config(crate::NAME, reason)
                    }
                    e => e,
                })?;
                Ok((master.addr.clone(), client))
            })
            .collect::<Result<Vec<_>>>()?;
        Self::start(clients, config).await
    }

    /// Redlock over the masters that `redis::Client`s of the application's
    /// reach (an odd number, 3 or more, each a different `host:port`), with
    /// `config`'s prefix, timeouts, eviction choice and retry delay; its
    /// masters and TLS are the clients' business and go unused. The
    /// backend opens its own connection to each master from its client,
    /// in the background, and waits for a majority as
    /// [`connect`](Self::connect) does.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_redlock::{RedlockBackend, RedlockConfig};
    ///
    /// let clients = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
    ///     .map(|url| redis::Client::open(url).unwrap());
    /// let backend = RedlockBackend::from_clients(clients, RedlockConfig::default().prefix("jobs:")).await?;
    /// let locker = Locker::new(backend);
    /// # Ok(()) }
    /// ```
    pub async fn from_clients(
        clients: impl IntoIterator<Item = Client>,
        config: RedlockConfig,
    ) -> Result<Self> {
        config.check_options()?;
        let clients: Vec<(String, Client)> = clients
            .into_iter()
            .map(|client| (Node::label_of(&client), client))
            .collect();
        check_masters(clients.iter().map(|(label, _)| label.as_str()))?;
        Self::start(clients, config).await
    }

    /// Connects to each master in the background (see [`Majority::start`]).
    async fn start(clients: Vec<(String, Client)>, config: RedlockConfig) -> Result<Self> {
        let retry_delay = config.retry_delay;
        let config = Arc::new(config);
        let masters = clients
            .into_iter()
            .map(|(label, client)| (label, Reach::new(client, config.clone())))
            .collect();
        Ok(Self {
            majority: Majority::start(masters, &config).await?,
            retry_delay,
            signals: ReleaseSignals::new(),
            observers: ReleaseSignals::new(),
        })
    }

    /// The number of masters.
    pub fn nodes(&self) -> usize {
        self.majority.nodes()
    }

    /// Wakes local waiters after a release: one for the lock; every one
    /// for a read-write lock, whose release may let many readers in; and
    /// an election's local observers.
    fn wake(&self, name: &LockName, kind: LockKind) {
        match kind.family() {
            Family::ReadWrite => self.signals.notify_all(name),
            Family::Election => {
                self.signals.notify(name);
                self.observers.notify_all(name);
            }
            _ => self.signals.notify(name),
        }
    }
}

#[async_trait]
impl LockBackend for RedlockBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(crate::NAME, Fencing::BestEffort)
            .with_read_write(true)
            .with_elections(true)
            .with_survives_node_loss(true)
            .with_ordered_requests(true)
            .with_ttl_range(
                self.majority.node_timeout() * 2,
                Capabilities::DEFAULT_MAX_TTL,
            )
    }

    /// `wakeups`: releases in this process that woke a local waiter.
    fn stats(&self) -> BackendStats {
        self.signals.stats()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        // `Locker` checks this too; a caller of the backend itself must not
        // get a semaphore, which majorities cannot keep.
        self.capabilities().check_kind(req.kind)?;
        if req.kind == LockKind::Leader {
            let lease = election::campaign(&self.majority, req).await?;
            if lease.is_some() {
                self.observers.notify_all(&req.name);
            }
            return Ok(lease);
        }
        self.majority.grant(req, |n| grant_on(n, req)).await
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(
            self,
            req,
            budget,
            Waking::signalled(&self.signals).cap(self.retry_delay),
        )
        .await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let limit = self.majority.node_limit(ttl);
        let sent = Instant::now();
        let answers = self
            .majority
            .on_every(limit, |n| renew_on(n, lease, ttl))
            .await;
        let extended = answers.ok.iter().filter(|e| **e).count();
        let refused = answers.ok.len() - extended;
        if extended >= self.majority.quorum() && Majority::still_valid(sent, ttl) {
            return Ok(lease.renewed(ttl, sent));
        }
        if refused > self.majority.nodes() - self.majority.quorum() {
            return Err(Error::not_held(lease.name()));
        }
        Err(self.majority.no_answer_quorum("renew", &answers, limit))
    }

    /// Ours while a majority of masters hold our key and the lease's
    /// validity, counted on this client's clock, has not run out.
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let limit = self.majority.node_limit(lease.ttl());
        let answers = self.majority.on_every(limit, |n| holds_on(n, lease)).await;
        let holding = answers.ok.iter().filter(|h| **h).count();
        if holding >= self.majority.quorum() {
            return Ok(!lease.is_expired());
        }
        if answers.ok.len() - holding > self.majority.nodes() - self.majority.quorum() {
            return Ok(false);
        }
        Err(self
            .majority
            .no_answer_quorum("check the owner", &answers, limit))
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let limit = self.majority.node_limit(lease.ttl());
        let answers = self
            .majority
            .release_everywhere(lease.name(), lease.kind(), lease.owner(), limit)
            .await;
        self.wake(lease.name(), lease.kind());
        let deleted = answers.ok.iter().filter(|d| **d).count();
        if deleted >= self.majority.quorum() {
            Ok(())
        } else if answers.ok.len() < self.majority.quorum() {
            Err(self.majority.no_answer_quorum("release", &answers, limit))
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.majority
            .release_everywhere(
                &req.name,
                req.kind,
                req.owner,
                self.majority.node_limit(req.ttl),
            )
            .await;
        self.wake(&req.name, req.kind);
        Ok(())
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        match kind.family() {
            Family::Mutex => {}
            Family::Election => {
                let leader = election::leader(&self.majority, name).await?;
                return Ok(leader
                    .map(|l| Holder::new(&l.owner, l.term, l.expires_in).of_kind(kind))
                    .into_iter()
                    .collect());
            }
            _ => {
                return Err(Error::unsupported(
                    crate::NAME,
                    "inspecting the holders of a semaphore or read-write lock",
                ));
            }
        }
        // The holder is whoever holds the key on a majority, if anybody
        // does; the mutex's token is stored nowhere.
        let agreed = self
            .majority
            .agreed_holder(name, kind, |a, b| a.owner == b.owner)
            .await?;
        Ok(agreed
            .first()
            .map(|h| Holder::without_token(&h.owner, election::least_left(&agreed)))
            .into_iter()
            .collect())
    }

    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        election::proclaim(&self.majority, lease, value).await?;
        self.observers.notify_all(lease.name());
        Ok(())
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        election::leader(&self.majority, name).await
    }

    /// Polls, woken early by this process's own changes.
    async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        let observers = self.observers.subscribe(name);
        let within = lock_redis::election::observation(seen, within);
        let _ = tokio::time::timeout(within, observers.notified()).await;
        Ok(())
    }
}
