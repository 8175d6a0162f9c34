//! The SQL text of every statement a dialect runs, for one table: what
//! each dialect writes (its own file) and [`SqlDriver`](crate::runner::SqlDriver) runs.

#[cfg(any(feature = "sqlite", feature = "mysql"))]
use crate::admission::Admission;
use crate::groups::Single;

/// The statements for one table and its companions. Each field gives its
/// parameters in the order they are bound, the TTL where a statement takes
/// one standing where the dialect puts it (`Dialect::TTL_FIRST`).
#[derive(Debug)]
pub(crate) struct Statements {
    /// The mutex's, on the locks table.
    pub(crate) mutex: OneRow,
    /// An election's, on the elections table: the same statements, but the
    /// acquire takes a fourth parameter, the candidate's value, written with
    /// the grant, and the holder query answers with the value as a fourth
    /// column. PostgreSQL's acquire and release also tell listeners.
    pub(crate) election: OneRow,
    /// `(value, name, owner, version)`: replaces the value of a live grant;
    /// one row affected (PostgreSQL: one row returned) when replaced.
    pub(crate) proclaim: String,
    /// How an attempt joins a semaphore or read-write lock.
    pub(crate) join: Join,
    /// `(family, name, owner, token, ttl_ms)`; one row affected when
    /// extended.
    pub(crate) renew_member: String,
    /// `(family, name, owner, token)`; one row affected (PostgreSQL: one
    /// row returned) when a live holder's row was deleted.
    pub(crate) leave: String,
    /// `(family, name, owner)`.
    pub(crate) leave_all: String,
    /// `(family, name, owner, token, waiters)` → rows `(owner, token)`:
    /// `(NULL, 0)` first when the holder's live row was deleted, then one
    /// per waiter admitted (see `Driver::leave_and_admit`); `None` where
    /// the dialect has no such statement.
    pub(crate) leave_and_admit: Option<String>,
    /// `(family, name, owner, token)` → `(count)` of such live holders.
    pub(crate) is_member: String,
    /// `(family, name)` → `(owner, kind, token, remaining_ms)` of every
    /// live holder, by token.
    pub(crate) members: String,
}

impl Statements {
    /// The statements of the mutex's or an election's row.
    pub(crate) fn of(&self, at: Single) -> &OneRow {
        match at {
            Single::Mutex => &self.mutex,
            Single::Election => &self.election,
        }
    }
}

/// The statements of a lock with one row and at most one holder (see
/// [`Single`]).
#[derive(Debug)]
pub(crate) struct OneRow {
    /// `(name, owner, ttl_ms)`, and an election's value. Takes the row if
    /// it is free, expired or already `owner`'s; bumps the version unless
    /// it is `owner`'s; answers with the version when taken
    /// (`Dialect::taken`).
    pub(crate) acquire: String,
    /// `(name, owner, version, ttl_ms)`; one row affected when extended.
    pub(crate) renew: String,
    /// `(name, owner, version)`: frees the row if owner and version match,
    /// answering whether its lease still ran (`Dialect::released`).
    pub(crate) release: String,
    /// `(name, owner)`.
    pub(crate) abandon: String,
    /// `(name)` → `(owner, version, remaining_ms)` of a live holder, and an
    /// election's value.
    pub(crate) holder: String,
}

/// How one dialect admits a holder of a semaphore or read-write lock.
#[derive(Debug)]
pub(crate) enum Join {
    /// One statement calling a function of ours: `(family, name, owner,
    /// kind, permits, ttl_ms)` → `(token)`, `NULL` when refused.
    #[cfg(feature = "postgres")]
    Function(String),
    /// A short transaction (the dialects without server-side functions we
    /// create).
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    Transaction(Box<Admission>),
}
