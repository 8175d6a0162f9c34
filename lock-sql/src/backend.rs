//! [`SqlBackend`]: its constructors (`connect`, `connect_with`,
//! `from_pool`) and the lock protocol over any [`Driver`].

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use lock_core::backend::OwnerToken;
use lock_core::backend::{
    AcquireRequest, BackendStats, Holder, Leader, Lease, LockBackend, WaitBudget, Waking,
    async_trait, poll_acquire,
};
use lock_core::{Capabilities, Error, FencingToken, LockKind, LockName, Result};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{client_limit, ttl_ms, within};
use crate::config::{Connection, SqlConfig};
use crate::driver::{Driver, Opened, Released, Row};
use crate::groups::Place;
use crate::handover::{Turn, Turns};
use crate::orphans::{Attempt, Orphans, Statement, Undo};
use crate::pool::SqlPool;
use crate::signals::Signals;

mod turns;

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
///
/// Elections keep one row per name in a table of their own, with the same
/// statements as the mutex's and the leader's value beside the version,
/// which is the term.
#[derive(Debug)]
pub struct SqlBackend {
    driver: Arc<dyn Driver>,
    signals: Arc<Signals>,
    orphans: Arc<Orphans>,
    op_timeout: Duration,
    max_name_len: usize,
    poll_cap: Duration,
    listener: Option<JoinHandle<()>>,
    /// The read-write acquirers of this backend, where a release can admit
    /// them (`handover.rs`).
    turns: Option<Arc<Turns>>,
}

impl SqlBackend {
    /// Waiters re-check at least this often when nothing wakes them.
    const POLL_CAP: Duration = Duration::from_millis(100);

    /// A backend on what a dialect opened.
    fn new(opened: Opened) -> Self {
        let (listener, poll_cap) = match opened.listener {
            Some((task, poll_cap)) => (Some(task), poll_cap),
            None => (None, Self::POLL_CAP),
        };
        let turns = opened.driver.admits_on_leave().then(Arc::default);
        Self {
            turns,
            driver: opened.driver,
            signals: opened.signals,
            orphans: Arc::new(Orphans::default()),
            op_timeout: client_limit(opened.statement_timeout),
            max_name_len: opened.max_name_len,
            poll_cap,
            listener,
        }
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
        Self::connect_with(SqlConfig::from_url(url)?).await
    }

    /// Connects to the database `config` names (see [`connect`](Self::connect)),
    /// after checking its fields: a mistake, or a config that names no
    /// database ([`SqlConfig::default`]), is an [`Error::InvalidConfig`].
    pub async fn connect_with(config: SqlConfig) -> Result<Self> {
        let (connection, checked) = config.into_parts()?;
        let opened = match connection {
            Connection::None => unreachable!("into_parts() refused it"),
            #[cfg(feature = "sqlite")]
            Connection::Sqlite(c) => crate::sqlite::connect(c, checked).await?,
            #[cfg(feature = "postgres")]
            Connection::Postgres(c) => crate::postgres::connect(*c, checked).await?,
            #[cfg(feature = "mysql")]
            Connection::MySql(c) => crate::mysql::connect(*c, checked).await?,
        };
        Ok(Self::new(opened))
    }

    /// A backend on a pool the application already has, creating the
    /// locks table if it is missing. The pool is used as it is; see the
    /// crate docs ("Bring your own pool") for what a pool should set and
    /// what the backend still opens itself (PostgreSQL's `LISTEN`
    /// connection).
    ///
    /// Of `config` it uses [`table`](SqlConfig::table),
    /// [`schema`](SqlConfig::schema) (PostgreSQL only),
    /// [`timeout`](SqlConfig::timeout) and
    /// [`create_tables`](SqlConfig::create_tables), checked as a URL's are
    /// (a mistake is an `Error::InvalidConfig` naming the option); the
    /// connection is the pool's business, so `pool_size`, `connect_timeout`
    /// and any database a URL named (its credentials, TLS, SQLite's
    /// `synchronous`) go unused, though checked as every config is.
    /// [`SqlConfig::default()`] is the usual
    /// start.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::Locker;
    /// use lock_sql::{SqlBackend, SqlConfig};
    /// use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool};
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("app.db");
    /// let pool = SqlitePool::connect_with(
    ///     SqliteConnectOptions::new()
    ///         .filename(path)
    ///         .create_if_missing(true)
    ///         .journal_mode(SqliteJournalMode::Wal),
    /// )
    /// .await
    /// .unwrap();
    /// let config = SqlConfig::default().table("job_locks");
    /// let backend = SqlBackend::from_pool(pool.clone(), config).await?;
    /// let locker = Locker::new(backend);
    /// let guard = locker.lock("nightly-report").await?;
    /// println!("fencing token {}", guard.token());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_pool<P: SqlPool>(pool: P, config: SqlConfig) -> Result<Self> {
        Ok(Self::new(pool.open(config).await?))
    }

    /// Tells local observers of the election `name` that its leader or
    /// value changed, unless the server's notice will.
    fn leader_changed_here(&self, name: &LockName) {
        if self.listener.is_none() {
            self.signals.leader_changed(name);
        }
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

/// Where `lease`'s lock is kept.
fn place_of(lease: &Lease) -> Place {
    Place::of(lease.kind(), lease.name().as_str())
}

#[async_trait]
impl LockBackend for SqlBackend {
    fn capabilities(&self) -> Capabilities {
        self.driver.capabilities()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        self.check_name(&req.name)?;
        if req.kind == LockKind::Leader {
            Leader::check_value(&req.value)?;
        }
        let owner = req.owner.to_hex();
        if !self.orphans.settled(&owner, self.op_timeout).await {
            // An earlier attempt of this request is still on its way.
            return Err(Error::timeout("acquire", self.op_timeout));
        }
        let turns = self.turns_for(req.kind);
        if let Some((turns, side)) = turns {
            match turns.turn(req.name.as_str(), &owner, side, req.ttl) {
                Turn::Handed(token, sent) => {
                    let token = FencingToken::from_i64(token);
                    return Ok(Some(Lease::granted(req, token, sent)));
                }
                Turn::Wait => return Ok(None),
                Turn::Attempt => {}
            }
        }
        let sent = Instant::now();
        let driver = self.driver.clone();
        let (name, ttl_ms) = (req.name.as_str().to_owned(), ttl_ms(req.ttl));
        let statement: Statement = match Place::of(req.kind, &name) {
            Place::Single(at) => {
                let value = req.value.clone();
                Box::pin(async move { driver.acquire(at, &name, &owner, ttl_ms, &value).await })
            }
            Place::Group(group, want) => {
                Box::pin(async move { driver.join(&group, &owner, want, ttl_ms).await })
            }
        };
        let undo = Undo {
            driver: &self.driver,
            orphans: &self.orphans,
            signals: &self.signals,
            req,
        };
        let token = Attempt::new(statement, undo).run(self.op_timeout).await;
        if let Some((turns, side)) = turns {
            let (name, owner) = (req.name.as_str(), req.owner.to_hex());
            let outcome = token.as_ref().ok().map(|t| t.map(|t| t.to_i64()));
            turns.attempted(name, &owner, side, req.ttl, sent, outcome);
        }
        let token = token?;
        if token.is_some() && req.kind == LockKind::Leader {
            self.leader_changed_here(&req.name);
        }
        Ok(token.map(|token| Lease::granted(req, token, sent)))
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        self.check_name(&req.name)?;
        let signals = self.signals.of(req.kind.family());
        let outcome = poll_acquire(
            self,
            req,
            budget,
            Waking::signalled(signals).cap(self.poll_cap),
        )
        .await;
        if outcome.is_err() {
            self.gave_up(req).await;
        }
        outcome
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let sent = Instant::now();
        let owner = lease.owner().to_hex();
        let (name, token, ttl_ms) = (lease.name().as_str(), lease.token(), ttl_ms(ttl));
        let renewed = match place_of(lease) {
            Place::Single(at) => {
                let renewal = self.driver.renew(at, name, &owner, token, ttl_ms);
                self.bounded("renew", renewal).await?
            }
            Place::Group(group, _) => {
                let renewal = self.driver.renew_member(&group, &owner, token, ttl_ms);
                self.bounded("renew", renewal).await?
            }
        };
        if renewed {
            if let Some((turns, _)) = self.turns_for(lease.kind()) {
                turns.renewed(name, &owner, sent + ttl);
            }
            Ok(lease.renewed(ttl, sent))
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let owner = lease.owner().to_hex();
        let (name, token) = (lease.name().as_str(), lease.token());
        let outcome = match place_of(lease) {
            Place::Single(at) => {
                let release = self.driver.release(at, name, &owner, token);
                self.bounded("release", release).await?
            }
            Place::Group(group, _) => match self.turns_for(lease.kind()) {
                Some((turns, side)) => self.leave_and_admit(turns, &group, lease, side).await?,
                None => {
                    let left = self.driver.leave(&group, &owner, token);
                    // A stale row frees nothing: nobody counts it any more.
                    match self.bounded("release", left).await? {
                        true => Released::InTime,
                        false => Released::NotOurs,
                    }
                }
            },
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
        let undo = self.driver.abandon_in(req.kind, req.name.as_str(), &owner);
        self.bounded("abandon", undo).await?;
        self.signals.wake(req.kind.family(), &req.name);
        Ok(())
    }

    /// The live holder's row names this lease's owner and version (for a
    /// semaphore or read-write lock: its owner and token).
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let owner = lease.owner().to_hex();
        let at = match place_of(lease) {
            Place::Single(at) => at,
            Place::Group(group, _) => {
                let check = self.driver.is_member(&group, &owner, lease.token());
                return self.bounded("check the owner", check).await;
            }
        };
        let row = self
            .bounded(
                "check the owner",
                self.driver.holder(at, lease.name().as_str()),
            )
            .await?;
        Ok(row.is_some_and(|row| row.owner == owner && row.version == lease.token()))
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        self.check_name(name)?;
        let holder = |row: Row| -> Result<Holder> {
            Ok(Holder::new(
                &owner_of(&row)?,
                row.version,
                Some(row.remaining),
            ))
        };
        let group = match Place::of(kind, name.as_str()) {
            Place::Single(at) => {
                let row = self
                    .bounded("holder", self.driver.holder(at, name.as_str()))
                    .await?;
                return row
                    .map(|r| Ok(holder(r)?.of_kind(kind)))
                    .into_iter()
                    .collect();
            }
            Place::Group(group, _) => group,
        };
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

    /// Replaces the value in the election's row, matching owner, version
    /// and a lease that still runs, as renew does.
    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        Leader::check_value(value)?;
        if lease.kind() != LockKind::Leader {
            return Err(Error::not_held(lease.name()));
        }
        let owner = lease.owner().to_hex();
        let proclaim = self
            .driver
            .proclaim(lease.name().as_str(), &owner, lease.token(), value);
        if !self.bounded("proclaim", proclaim).await? {
            return Err(Error::not_held(lease.name()));
        }
        self.leader_changed_here(lease.name());
        Ok(())
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        self.check_name(name)?;
        let found = self
            .bounded("leader", self.driver.leader(name.as_str()))
            .await?;
        found
            .map(|(row, value)| {
                let owner = owner_of(&row)?;
                Ok(Leader::new(&owner, value, row.version, Some(row.remaining)))
            })
            .transpose()
    }

    /// Woken by local grants, proclaims and releases, and on PostgreSQL by
    /// every backend's through `LISTEN`; a leader whose lease runs out
    /// tells nobody, so the wait ends by then at the latest. A change made
    /// between the observer's read and this subscription goes unheard, and
    /// is seen at the next read, after `within`.
    async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        let observing = self.signals.leaders().subscribe(name);
        let within = seen
            .and_then(|l| l.expires_in)
            .map_or(within, |left| within.min(left + Duration::from_millis(1)));
        let _ = tokio::time::timeout(within, observing.notified()).await;
        Ok(())
    }

    /// `wakeups`: release notices sent to local waiters of every family
    /// (PostgreSQL: from `LISTEN`; the other dialects: releases in this
    /// process).
    fn stats(&self) -> BackendStats {
        self.signals.stats()
    }
}

/// The owner token a row names, cut as holders show it; a row whose owner
/// is no token of ours is an error, not a holder.
fn owner_of(row: &Row) -> Result<String> {
    Ok(OwnerToken::from_hex(&row.owner)?.to_hex())
}

impl Drop for SqlBackend {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}
