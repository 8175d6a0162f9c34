//! What one SQL dialect provides: the statements, run on its own pool, and
//! what the backend is made from once a dialect has connected ([`Opened`]).
//! All lease bookkeeping, timeouts and waiting live in [`crate::SqlBackend`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::async_trait;
use lock_core::{Capabilities, FencingToken, LockKind, LockName, Result};
use tokio::task::JoinHandle;

use crate::groups::{GroupKey, Place, Single, Want};
use crate::handover::Named;
use crate::signals::Signals;

/// The state of a lock row, as the holder query returns it.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) owner: String,
    pub(crate) version: FencingToken,
    pub(crate) remaining: Duration,
}

impl Row {
    /// A row from the raw columns the holder queries return: versions start
    /// at 1, and a lease already run out has no time left.
    pub(crate) fn from_columns(owner: String, version: i64, remaining_ms: i64) -> Self {
        Self {
            owner,
            version: FencingToken::from_i64(version),
            remaining: Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0)),
        }
    }
}

impl Row {
    /// A row of a holder query: `(owner, version, remaining_ms)`.
    pub(crate) fn from_row<R>(r: &R) -> Result<Self, sqlx::Error>
    where
        R: sqlx::Row,
        usize: sqlx::ColumnIndex<R>,
        for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
        for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    {
        Ok(Self::from_columns(
            r.try_get(0)?,
            r.try_get(1)?,
            r.try_get(2)?,
        ))
    }
}

/// A live holder of a semaphore or read-write lock, as the members query
/// returns it.
#[derive(Debug)]
pub(crate) struct Member {
    /// The lock's holder, as a mutex's row holds it.
    pub(crate) row: Row,
    /// The row's `kind` column: `permit`, `read` or `write`.
    pub(crate) kind: String,
}

impl Member {
    /// A row of a members query: `(owner, kind, token, remaining_ms)`.
    pub(crate) fn from_row<R>(r: &R) -> Result<Self, sqlx::Error>
    where
        R: sqlx::Row,
        usize: sqlx::ColumnIndex<R>,
        for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
        for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    {
        Ok(Self {
            row: Row::from_columns(r.try_get(0)?, r.try_get(2)?, r.try_get(3)?),
            kind: r.try_get(1)?,
        })
    }
}

/// What a compare-owner-and-version release found.
#[cfg_attr(not(feature = "raw"), allow(unreachable_pub))]
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    /// The row was ours and its lease still ran.
    InTime,
    /// The row was ours but its lease had run out (nobody took it over).
    Late,
    /// Another owner has the row, or another version: nothing was changed.
    NotOurs,
}

/// One SQL dialect. Every statement uses the database's clock for expiry, so
/// clients on hosts with skewed clocks still agree.
#[async_trait]
pub(crate) trait Driver: Send + Sync + fmt::Debug + 'static {
    fn capabilities(&self) -> Capabilities;

    /// One statement: takes the mutex's or the election's row if it is
    /// free, expired, or already held by `owner`; returns the row's version
    /// when taken. An election's row gets `value` with the grant.
    async fn acquire(
        &self,
        at: Single,
        name: &str,
        owner: &str,
        ttl_ms: i64,
        value: &str,
    ) -> Result<Option<FencingToken>>;

    /// Extends the lease if `owner` and `version` still match and it has not
    /// run out; `false` otherwise.
    async fn renew(
        &self,
        at: Single,
        name: &str,
        owner: &str,
        version: FencingToken,
        ttl_ms: i64,
    ) -> Result<bool>;

    /// Frees the row if `owner` and `version` match; the row and its version
    /// stay.
    async fn release(
        &self,
        at: Single,
        name: &str,
        owner: &str,
        version: FencingToken,
    ) -> Result<Released>;

    /// Frees the row if `owner` holds it, whatever the version.
    async fn abandon(&self, at: Single, name: &str, owner: &str) -> Result<()>;

    /// The live holder of `name`, if any.
    async fn holder(&self, at: Single, name: &str) -> Result<Option<Row>>;

    /// The live leader of the election `name` and its value, if any.
    async fn leader(&self, name: &str) -> Result<Option<(Row, String)>>;

    /// Replaces the value of the election's grant if `owner` and `version`
    /// still match and its lease still runs; `false` otherwise.
    async fn proclaim(
        &self,
        name: &str,
        owner: &str,
        version: FencingToken,
        value: &str,
    ) -> Result<bool>;

    /// One attempt to join a semaphore or read-write lock under the rule of
    /// `crate::groups::decide`: the holder's token when admitted (or already
    /// holding), `None` when not, in which case a writer leaves its waiting
    /// row behind.
    async fn join(
        &self,
        group: &GroupKey,
        owner: &str,
        want: Want,
        ttl_ms: i64,
    ) -> Result<Option<FencingToken>>;

    /// Extends a holder's row if `owner` and `token` match and its lease
    /// still runs; `false` otherwise.
    async fn renew_member(
        &self,
        group: &GroupKey,
        owner: &str,
        token: FencingToken,
        ttl_ms: i64,
    ) -> Result<bool>;

    /// Deletes a holder's row if `owner` and `token` match and its lease
    /// still runs; `false` otherwise (a stale row is left to the next
    /// admission, which deletes every expired row of its group).
    async fn leave(&self, group: &GroupKey, owner: &str, token: FencingToken) -> Result<bool>;

    /// Whether [`leave_and_admit`](Self::leave_and_admit) admits waiters:
    /// always, but on a PostgreSQL database without the leaving function.
    fn admits_on_leave(&self) -> bool;

    /// [`leave`](Self::leave), then the admission of each of `waiters` in
    /// turn, in one transaction: whether the holder's row was deleted, and
    /// the waiters admitted, with their tokens. Nobody is admitted unless
    /// the row was deleted; where the dialect cannot admit on leaving, the
    /// leave alone.
    async fn leave_and_admit(
        &self,
        group: &GroupKey,
        owner: &str,
        token: FencingToken,
        waiters: &[Named],
    ) -> Result<(bool, Vec<(String, i64)>)>;

    /// Deletes every row of `owner` in the group: its grant or its waiting
    /// row.
    async fn leave_all(&self, group: &GroupKey, owner: &str) -> Result<()>;

    /// The live holders (not the waiting writers) of a semaphore or
    /// read-write lock, oldest grant first.
    async fn members(&self, group: &GroupKey) -> Result<Vec<Member>>;

    /// Whether a holder's row with this `owner` and `token` is live.
    async fn is_member(&self, group: &GroupKey, owner: &str, token: FencingToken) -> Result<bool>;

    /// Undoes whatever `owner` has in the lock of `kind` called `name`.
    async fn abandon_in(&self, kind: LockKind, name: &str, owner: &str) -> Result<()> {
        match Place::of(kind, name) {
            Place::Single(at) => self.abandon(at, name, owner).await,
            Place::Group(group, _) => self.leave_all(&group, owner).await,
        }
    }
}

/// What a dialect hands the backend once connected, so that no dialect
/// needs the backend's own fields: its driver, the server's limit on a
/// statement, the longest name the table holds, and how local waiters
/// learn of releases.
///
/// `pub` only because the sealed `SqlPool`'s method returns it; its module
/// is private, so no user can name it.
#[derive(Debug)]
pub struct Opened {
    pub(crate) driver: Arc<dyn Driver>,
    /// The database stops a statement after this (PostgreSQL's
    /// `statement_timeout`, MySQL's lock wait and statement limits,
    /// SQLite's busy timeout).
    pub(crate) statement_timeout: Duration,
    pub(crate) max_name_len: usize,
    pub(crate) signals: Arc<Signals>,
    /// A task feeding `signals` from the server's release notices, and how
    /// often waiters still re-check beside it, as a safety net only.
    pub(crate) listener: Option<(JoinHandle<()>, Duration)>,
}

impl Opened {
    pub(crate) fn new(driver: impl Driver, statement_timeout: Duration) -> Self {
        Self {
            driver: Arc::new(driver),
            statement_timeout,
            max_name_len: LockName::MAX_LEN,
            signals: Arc::default(),
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

    /// Keeps `listener`, a task feeding [`Self::signals`], alive as long as
    /// the backend, and lets waiters poll only every `poll_cap`.
    #[cfg(feature = "postgres")]
    pub(crate) fn with_listener(mut self, listener: JoinHandle<()>, poll_cap: Duration) -> Self {
        self.listener = Some((listener, poll_cap));
        self
    }
}
