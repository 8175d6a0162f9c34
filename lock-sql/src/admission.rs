//! One attempt to join a semaphore or read-write lock as a short
//! transaction, for the dialects without server-side functions we create
//! (SQLite, MySQL and MariaDB): lock the group's row and read its rows
//! afresh, decide in Rust ([`decide`], the rule PostgreSQL's function has
//! in SQL), write, commit.
//!
//! Counting is safe because of the order. The group's row is locked first
//! (SQLite: `BEGIN IMMEDIATE` takes the database's write lock at once;
//! MySQL: the read is a locking read, `FOR UPDATE`, which finds the group's
//! row by its whole primary key, a constant lookup the server makes, and
//! locks, before it reads any holder; a read that lost either key would
//! lose that order), so no other admission of the group runs until this
//! one commits; only then are the holders read, by SQLite under its write
//! lock (every commit before it visible), by MySQL's locking read, which
//! reads the newest committed rows and waits for a renewal still in flight
//! instead of counting the row as expired from an old snapshot. The
//! group's row is made by its first attempt (an upsert, which locks it
//! too), found missing by the read; the read is then made again. Every
//! later attempt reads once, with no statement before it: one statement
//! fewer on every attempt, on a server whose CPU sets the rate
//! (docs/BENCHMARKS.md, "MariaDB: where the semaphore's time goes").

use lock_core::backend::AcquireRequest;
use sqlx::{
    AssertSqlSafe, ColumnIndex, Connection as _, Database, Decode, Encode, Executor, IntoArguments,
    Row as _, Type,
};

use crate::groups::{GroupKey, Want};

mod leave;

/// The `kind` of a waiting writer's row: it holds nothing, and has token 0
/// (grants start at 1). The statements spell it out as `'wait'`.
pub(crate) const WAITING: &str = "wait";

/// A row of the holders table, as the admission transaction read it.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) owner: String,
    pub(crate) kind: String,
    pub(crate) token: i64,
    /// Whether its lease still ran when it was read (by the database clock).
    pub(crate) live: bool,
}

/// What an attempt does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The owner already holds (a retry whose first reply was lost): extend
    /// its row and answer with its token.
    Keep(i64),
    /// A new holder with this token.
    Grant(i64),
    /// A writer that must wait: write its `wait` row.
    Queue,
    /// Not now, and nothing to write.
    Refuse,
}

/// The rule, as `lock_core::MemoryBackend` has it: a permit while fewer
/// live holders than `permits`; a reader while no live writer holds and no
/// other writer waits; a writer while nobody holds. `last_token` is the
/// group's counter; a grant takes the next one.
pub(crate) fn decide(last_token: i64, members: &[Member], owner: &str, want: Want) -> Outcome {
    let live = || members.iter().filter(|m| m.live);
    let holders = || live().filter(|m| m.kind != WAITING);
    if let Some(mine) = holders().find(|m| m.owner == owner) {
        return Outcome::Keep(mine.token);
    }
    let free = match want.kind {
        "permit" => i64::try_from(holders().count()).unwrap_or(i64::MAX) < want.permits,
        "read" => live().all(|m| m.kind == "read" || (m.kind == WAITING && m.owner == owner)),
        _ => holders().next().is_none(),
    };
    match (free, want.kind) {
        (true, _) => Outcome::Grant(last_token + 1),
        (false, "write") => Outcome::Queue,
        (false, _) => Outcome::Refuse,
    }
}

/// The statements of one dialect; `?` parameters bound in the order each
/// field says.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Starts the transaction.
    pub(crate) begin: &'static str,
    /// `(family, name)`: makes the group's row if it is missing and locks
    /// it; only run when [`read`](Self::read) found no row.
    pub(crate) lock: String,
    /// `(family, name)` → rows `(last_token, owner, kind, token,
    /// remaining_ms)`, the last four `NULL` when the group has no rows;
    /// none when the group has no row yet. Locks the group's row (see
    /// above).
    pub(crate) read: String,
    /// `(family, name)`: deletes the group's expired rows.
    pub(crate) prune: String,
    /// `(ttl_ms, family, name, owner)`: extends the owner's row.
    pub(crate) extend: String,
    /// `(token, family, name)`: the group's last token.
    pub(crate) advance: String,
    /// `(family, name, owner, kind, token, ttl_ms)` for each row: writes
    /// the owner's row (a holder's, or a waiting writer's), replacing any
    /// it had.
    pub(crate) put: Put,
}

/// The statement that writes holders' rows, for one row or several (a
/// release admitting its waiters writes theirs in one).
#[derive(Debug)]
pub(crate) struct Put {
    head: String,
    row: String,
    tail: String,
    /// The one-row statement, made once.
    one: String,
}

impl Put {
    /// `head`, then `row` once per row (comma-separated), then `tail`.
    pub(crate) fn new(head: String, row: String, tail: String) -> Self {
        let one = format!("{head} {row} {tail}");
        Self {
            head,
            row,
            tail,
            one,
        }
    }

    /// The statement writing `rows` rows.
    pub(crate) fn rows(&self, rows: usize) -> std::borrow::Cow<'_, str> {
        if rows == 1 {
            return self.one.as_str().into();
        }
        let values = vec![self.row.as_str(); rows].join(", ");
        format!("{} {values} {}", self.head, self.tail).into()
    }
}

impl Admission {
    /// Runs one attempt on `conn`: the token when admitted.
    pub(crate) async fn run<DB>(
        &self,
        conn: &mut DB::Connection,
        group: &GroupKey,
        owner: &str,
        want: Want,
        ttl_ms: i64,
    ) -> Result<Option<i64>, sqlx::Error>
    where
        DB: Database,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        DB::Arguments: IntoArguments<DB>,
        for<'q> &'q str: Encode<'q, DB> + Type<DB>,
        for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
        for<'r> String: Decode<'r, DB> + Type<DB>,
        usize: ColumnIndex<DB::Row>,
    {
        let (family, name) = (group.family, group.name.as_str());
        let mut tx = conn.begin_with(self.begin).await?;
        let read = || {
            sqlx::query::<DB>(AssertSqlSafe(self.read.as_str()))
                .bind(family)
                .bind(name)
        };
        let mut rows = read().fetch_all(&mut *tx).await?;
        if rows.is_empty() {
            // The group's first attempt: its row is made, and read
            // again. Once it is there, the read alone locks it.
            sqlx::query::<DB>(AssertSqlSafe(self.lock.as_str()))
                .bind(family)
                .bind(name)
                .execute(&mut *tx)
                .await?;
            rows = read().fetch_all(&mut *tx).await?;
        }
        let (last_token, members) = read_members::<DB>(rows)?;
        let put = |kind: &'static str, token: i64, ttl_ms: i64| {
            sqlx::query::<DB>(AssertSqlSafe(self.put.one.as_str()))
                .bind(family)
                .bind(name)
                .bind(owner)
                .bind(kind)
                .bind(token)
                .bind(ttl_ms)
        };
        let token = match decide(last_token, &members, owner, want) {
            Outcome::Keep(token) => {
                sqlx::query::<DB>(AssertSqlSafe(self.extend.as_str()))
                    .bind(ttl_ms)
                    .bind(family)
                    .bind(name)
                    .bind(owner)
                    .execute(&mut *tx)
                    .await?;
                Some(token)
            }
            Outcome::Grant(token) => {
                sqlx::query::<DB>(AssertSqlSafe(self.advance.as_str()))
                    .bind(token)
                    .bind(family)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                put(want.kind, token, ttl_ms).execute(&mut *tx).await?;
                Some(token)
            }
            Outcome::Queue => {
                // Marked for at least `WRITER_MARK`, longer than the
                // writer's naps between attempts.
                let mark_ms = ttl_ms.max(crate::client::ttl_ms(AcquireRequest::WRITER_MARK));
                put(WAITING, 0, mark_ms).execute(&mut *tx).await?;
                None
            }
            Outcome::Refuse => None,
        };
        // Expired rows go last, on the clock of this statement: our own
        // row, read live, was extended above, so a prune on a later
        // clock cannot take a grant this attempt reports.
        if members.iter().any(|m| !m.live) {
            sqlx::query::<DB>(AssertSqlSafe(self.prune.as_str()))
                .bind(family)
                .bind(name)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(token)
    }
}

/// The group's last token and its members, from the rows of
/// [`Admission::read`].
pub(crate) fn read_members<DB>(rows: Vec<DB::Row>) -> Result<(i64, Vec<Member>), sqlx::Error>
where
    DB: Database,
    for<'q> i64: Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let mut last_token = 0;
    let mut members = Vec::with_capacity(rows.len());
    for row in rows {
        last_token = row.try_get(0)?;
        if let Some(owner) = row.try_get::<Option<String>, _>(1)? {
            members.push(Member {
                owner,
                kind: row.try_get::<Option<String>, _>(2)?.unwrap_or_default(),
                token: row.try_get::<Option<i64>, _>(3)?.unwrap_or(0),
                live: row.try_get::<Option<i64>, _>(4)?.unwrap_or(0) > 0,
            });
        }
    }
    Ok((last_token, members))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(owner: &str, kind: &str, token: i64, live: bool) -> Member {
        Member {
            owner: owner.into(),
            kind: kind.into(),
            token,
            live,
        }
    }

    const READ: Want = Want {
        kind: "read",
        permits: 0,
    };
    const WRITE: Want = Want {
        kind: "write",
        permits: 0,
    };

    #[test]
    fn permits_count_live_holders_only() {
        let two = Want {
            kind: "permit",
            permits: 2,
        };
        let held = [
            member("a", "permit", 4, true),
            member("b", "permit", 5, true),
        ];
        assert_eq!(decide(5, &held, "c", two), Outcome::Refuse);
        assert_eq!(decide(5, &held, "b", two), Outcome::Keep(5));
        let one_expired = [
            member("a", "permit", 4, true),
            member("b", "permit", 5, false),
        ];
        assert_eq!(decide(5, &one_expired, "c", two), Outcome::Grant(6));
        // An expired row of the same owner is no grant to keep.
        assert_eq!(decide(5, &one_expired, "b", two), Outcome::Grant(6));
    }

    #[test]
    fn readers_share_and_hold_back_for_a_waiting_writer() {
        let readers = [member("a", "read", 1, true), member("b", "read", 2, true)];
        assert_eq!(decide(2, &readers, "c", READ), Outcome::Grant(3));
        assert_eq!(decide(2, &readers, "w", WRITE), Outcome::Queue);
        let queued = [member("a", "read", 1, true), member("w", WAITING, 0, true)];
        assert_eq!(decide(2, &queued, "c", READ), Outcome::Refuse);
        assert_eq!(decide(2, &queued, "a", READ), Outcome::Keep(1));
        let gave_up = [member("a", "read", 1, true), member("w", WAITING, 0, false)];
        assert_eq!(decide(2, &gave_up, "c", READ), Outcome::Grant(3));
    }

    #[test]
    fn a_writer_needs_nobody_holding() {
        let waiting = [member("w", WAITING, 0, true), member("v", WAITING, 0, true)];
        assert_eq!(decide(7, &waiting, "w", WRITE), Outcome::Grant(8));
        let writer = [member("w", "write", 8, true)];
        assert_eq!(decide(8, &writer, "c", READ), Outcome::Refuse);
        assert_eq!(decide(8, &writer, "v", WRITE), Outcome::Queue);
        assert_eq!(decide(8, &writer, "w", WRITE), Outcome::Keep(8));
    }
}
