//! [`SqlBackend`]: the lock protocol over any [`Driver`].

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use lock_core::backend::{
    AcquireRequest, BackendStats, Holder, Lease, LockBackend, WaitBudget, Waking, async_trait,
    millis, poll_acquire,
};
use lock_core::{Capabilities, Error, Family, LockKind, LockName, OwnerToken, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::SqlConfig;
use crate::driver::{Driver, Released, Row};
use crate::groups::{GroupKey, Want};
use crate::orphans::{Attempt, Orphans, Statement, Undo};
use crate::signals::Signals;

/// A lock backend on a SQL database: one row per lock name with an owner, a
/// version and an expiry time set by the database's clock.
///
/// - **acquire** is one `INSERT … ON CONFLICT DO UPDATE … WHERE` statement that
///   takes the row only if it is free or expired, and bumps the version;
/// - **renew** and **release** compare both the owner and the version;
/// - **fencing token** = the version. Release keeps the row, so the version
///   never goes backwards for a name.
///
/// Waiters poll with jittered backoff; a release in the same process wakes a
/// local waiter at once (through the server's notice where the dialect has
/// one).
///
/// An acquire statement the caller stopped waiting for is left to finish in
/// a task of its own, which frees whatever it took (see `orphans.rs`).
///
/// Semaphores and read-write locks keep one row per holder in a table of
/// their own (see `groups.rs` and the crate's README).
#[derive(Debug)]
pub struct SqlBackend {
    driver: Arc<dyn Driver>,
    signals: Arc<Signals>,
    orphans: Arc<Orphans>,
    op_timeout: Duration,
    max_name_len: usize,
    poll_cap: Duration,
    listener: Option<JoinHandle<()>>,
}

impl SqlBackend {
    /// Waiters re-check at least this often when nothing wakes them.
    const POLL_CAP: Duration = Duration::from_millis(100);

    /// How much longer than the server's own limit the client waits for a
    /// statement, so that the server's definite answer ("stopped, nothing
    /// changed") normally comes first.
    const CLIENT_MARGIN: Duration = Duration::from_secs(1);

    /// A backend on `driver`, whose database stops a statement after
    /// `statement_timeout` (PostgreSQL's `statement_timeout`, MySQL's lock
    /// wait and statement limits, SQLite's busy timeout).
    pub(crate) fn new(driver: impl Driver, statement_timeout: Duration) -> Self {
        Self {
            driver: Arc::new(driver),
            signals: Arc::new(Signals::default()),
            orphans: Arc::new(Orphans::default()),
            op_timeout: Self::client_limit(statement_timeout),
            max_name_len: LockName::MAX_LEN,
            poll_cap: Self::POLL_CAP,
            listener: None,
        }
    }

    /// Limits names to what the table's `name` column holds, when a table
    /// made by somebody else has a narrower column than ours.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) fn with_name_limit(mut self, max_len: usize) -> Self {
        self.max_name_len = max_len.min(LockName::MAX_LEN);
        self
    }

    /// The registry a server-side notification listener feeds.
    #[cfg(feature = "postgres")]
    pub(crate) fn signals(&self) -> Arc<Signals> {
        self.signals.clone()
    }

    /// Keeps `listener` (a task feeding [`Self::signals`]) alive as long as
    /// the backend, and lets waiters poll rarely, as a safety net only.
    #[cfg(feature = "postgres")]
    pub(crate) fn with_listener(mut self, listener: JoinHandle<()>, poll_cap: Duration) -> Self {
        self.listener = Some(listener);
        self.poll_cap = poll_cap;
        self
    }

    fn check_name(&self, name: &LockName) -> Result<()> {
        if name.as_str().len() > self.max_name_len {
            return Err(Error::invalid_name(
                name.to_string(),
                format!(
                    "the table's name column holds at most {} characters",
                    self.max_name_len
                ),
            ));
        }
        Ok(())
    }

    /// Connects to the database a URL names. The schemes accepted depend on
    /// the features compiled in: `sqlite://` (feature `sqlite`),
    /// `postgres://` and `postgresql://` (feature `postgres`), `mysql://` and
    /// `mariadb://` (feature `mysql`).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(SqlConfig::parse(url)?).await
    }

    /// Connects to the database `config` names; see [`connect`](Self::connect).
    pub async fn connect_with(config: SqlConfig) -> Result<Self> {
        config.connect().await
    }

    /// How long the client waits for a statement the server stops after
    /// `statement_timeout`.
    pub(crate) fn client_limit(statement_timeout: Duration) -> Duration {
        statement_timeout + Self::CLIENT_MARGIN
    }

    /// Runs one statement within the operation timeout.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        statement: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        within(self.op_timeout, operation, statement).await
    }
}

/// Runs `statement` for at most `limit`.
pub(crate) async fn within<T>(
    limit: Duration,
    operation: &'static str,
    statement: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, statement)
        .await
        .unwrap_or(Err(Error::timeout(operation, limit)))
}

/// The semaphore or read-write lock `lease` is of; `None` for the mutex.
fn group_of(lease: &Lease) -> Option<GroupKey> {
    match lease.kind().family() {
        Family::Mutex => None,
        family => Some(GroupKey::new(family, lease.name().as_str())),
    }
}

/// `ttl` in whole milliseconds as the `BIGINT` the statements bind.
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    // TTLs are bounded by the capabilities long before this could saturate.
    i64::try_from(millis(ttl)).unwrap_or(i64::MAX)
}

#[async_trait]
impl LockBackend for SqlBackend {
    fn capabilities(&self) -> Capabilities {
        self.driver.capabilities()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        self.check_name(&req.name)?;
        let owner = req.owner.to_hex();
        if !self.orphans.settled(&owner, self.op_timeout).await {
            // An earlier attempt of this request is still on its way.
            return Err(Error::timeout("acquire", self.op_timeout));
        }
        let sent = Instant::now();
        let driver = self.driver.clone();
        let (name, ttl_ms) = (req.name.as_str().to_owned(), ttl_ms(req.ttl));
        let statement: Statement = match Want::of(req.kind) {
            None => Box::pin(async move { driver.acquire(&name, &owner, ttl_ms).await }),
            Some(want) => {
                let group = GroupKey::new(req.kind.family(), &name);
                Box::pin(async move { driver.join(&group, &owner, want, ttl_ms).await })
            }
        };
        let undo = Undo {
            driver: &self.driver,
            orphans: &self.orphans,
            signals: &self.signals,
            req,
        };
        let token = Attempt::new(statement, undo).run(self.op_timeout).await?;
        Ok(token.map(|token| Lease::granted(req, token, sent)))
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        self.check_name(&req.name)?;
        let signals = self.signals.of(req.kind.family());
        poll_acquire(
            self,
            req,
            budget,
            Waking::signalled(signals).cap(self.poll_cap),
        )
        .await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let sent = Instant::now();
        let owner = lease.owner().to_hex();
        let (name, token, ttl_ms) = (lease.name().as_str(), lease.token(), ttl_ms(ttl));
        let renewed = match group_of(lease) {
            None => {
                self.bounded("renew", self.driver.renew(name, &owner, token, ttl_ms))
                    .await?
            }
            Some(group) => {
                let renewal = self.driver.renew_member(&group, &owner, token, ttl_ms);
                self.bounded("renew", renewal).await?
            }
        };
        if renewed {
            Ok(lease.renewed(ttl, sent))
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let owner = lease.owner().to_hex();
        let (name, token) = (lease.name().as_str(), lease.token());
        let outcome = match group_of(lease) {
            None => {
                self.bounded("release", self.driver.release(name, &owner, token))
                    .await?
            }
            Some(group) => {
                let left = self.driver.leave(&group, &owner, token);
                // A stale row frees nothing: nobody counts it any more.
                match self.bounded("release", left).await? {
                    true => Released::InTime,
                    false => Released::NotOurs,
                }
            }
        };
        // With a listener, the server's notice of this release wakes a local
        // waiter too; waking one here as well would wake two per release.
        if outcome != Released::NotOurs && self.listener.is_none() {
            self.signals.wake(lease.kind().family(), lease.name());
        }
        match outcome {
            Released::InTime => Ok(()),
            Released::Late | Released::NotOurs => Err(Error::not_held(lease.name())),
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        let owner = req.owner.to_hex();
        let family = req.kind.family();
        let undo = self.driver.abandon_in(family, req.name.as_str(), &owner);
        self.bounded("abandon", undo).await?;
        self.signals.wake(family, &req.name);
        Ok(())
    }

    /// The live holder's row names this lease's owner and version (for a
    /// semaphore or read-write lock: its owner and token).
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let owner = lease.owner().to_hex();
        if let Some(group) = group_of(lease) {
            let check = self.driver.is_member(&group, &owner, lease.token());
            return self.bounded("check the owner", check).await;
        }
        let row = self
            .bounded("check the owner", self.driver.holder(lease.name().as_str()))
            .await?;
        Ok(row.is_some_and(|row| row.owner == owner && row.version == lease.token()))
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        self.check_name(name)?;
        // A row whose owner is no token of ours is an error, not a holder.
        let holder = |row: Row| -> Result<Holder> {
            let owner = OwnerToken::from_hex(&row.owner)?.to_hex();
            Ok(Holder::new(&owner, row.version, Some(row.remaining)))
        };
        if kind.family() == Family::Mutex {
            let row = self
                .bounded("holder", self.driver.holder(name.as_str()))
                .await?;
            return row.map(holder).into_iter().collect();
        }
        let group = GroupKey::new(kind.family(), name.as_str());
        let members = self.bounded("holders", self.driver.members(&group)).await?;
        members
            .into_iter()
            .map(|m| {
                let side = match m.kind.as_str() {
                    "read" => LockKind::Read,
                    "write" => LockKind::Write,
                    _ => kind,
                };
                Ok(holder(m.row)?.of_kind(side))
            })
            .collect()
    }

    /// `wakeups`: release notices sent to local waiters of every family
    /// (PostgreSQL: from `LISTEN`; the other dialects: releases in this
    /// process).
    fn stats(&self) -> BackendStats {
        self.signals.stats()
    }
}

impl Drop for SqlBackend {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}
