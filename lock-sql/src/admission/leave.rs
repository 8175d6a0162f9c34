//! A read-write lock's release that admits the waiters a backend names to
//! it (`handover.rs`), for the dialects whose admission is a transaction
//! run from here: the release's delete, then the waiters decided by the
//! same rule an attempt follows ([`decide`]), on what the transaction has
//! read and written so far (a writer refused is not marked waiting, as its
//! own attempt would mark it), and their grants written together: one
//! advance of the group's token and one insert for all of them, so that a
//! writer's release admitting every reader costs the statements of one
//! admission.

use lock_core::FencingToken;
use sqlx::{
    AssertSqlSafe, ColumnIndex, Connection as _, Database, Decode, Encode, Executor, IntoArguments,
    Type,
};

use super::{Admission, Member, Outcome, decide, read_members};
use crate::groups::{GroupKey, Want};
use crate::handover::Named;

/// A row a release's admission writes.
#[derive(Debug, PartialEq, Eq)]
struct Row<'a> {
    owner: &'a str,
    kind: &'static str,
    token: i64,
    ttl_ms: i64,
}

/// What a release's admission writes, decided before it writes anything.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan<'a> {
    /// Waiters that already held (a grant made by a statement whose answer
    /// was lost): their rows extended by their TTL.
    keep: Vec<(&'a str, i64)>,
    /// The group's last token once the grants are made.
    last_token: i64,
    /// The grants.
    rows: Vec<Row<'a>>,
    /// The waiters admitted, with their tokens.
    admitted: Vec<(String, i64)>,
}

/// Decides each of `waiters` in turn, as its own attempt would after the
/// ones before it: a grant joins `members`, so a writer granted keeps out
/// the readers after it.
fn plan<'a>(mut last_token: i64, mut members: Vec<Member>, waiters: &'a [Named]) -> Plan<'a> {
    let mut plan = Plan::default();
    for waiter in waiters {
        let (owner, kind) = (waiter.owner.as_str(), waiter.side.tag());
        let want = Want { kind, permits: 0 };
        let (kind, token, ttl_ms) = match decide(last_token, &members, owner, want) {
            Outcome::Keep(token) => {
                plan.keep.push((owner, waiter.ttl_ms));
                plan.admitted.push((owner.to_owned(), token));
                continue;
            }
            Outcome::Grant(token) => {
                last_token = token;
                plan.admitted.push((owner.to_owned(), token));
                (kind, token, waiter.ttl_ms)
            }
            // A writer refused gets no waiting mark from here, where its
            // own attempt would write one: it may have given up while this
            // transaction ran, and a mark nobody abandons keeps readers out
            // for its whole length. Put back to waiting, it attempts and
            // marks itself.
            Outcome::Queue | Outcome::Refuse => continue,
        };
        members.retain(|m| m.owner != owner);
        members.push(Member {
            owner: owner.to_owned(),
            kind: kind.to_owned(),
            token,
            live: true,
        });
        plan.rows.push(Row {
            owner,
            kind,
            token,
            ttl_ms,
        });
    }
    plan.last_token = last_token;
    plan
}

impl Admission {
    /// A release that admits: in one transaction, the group's row locked
    /// and its rows read (as an attempt does first), the holder's live row
    /// deleted by `leave` (`(family, name, owner, token)`, its rows counted
    /// by `affected`), then `waiters` admitted by [`plan`]. Whether the row
    /// was deleted, and the waiters admitted; nobody is admitted unless
    /// the row was deleted.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn leave_and_admit<DB>(
        &self,
        conn: &mut DB::Connection,
        leave: &str,
        group: &GroupKey,
        owner: &str,
        token: FencingToken,
        waiters: &[Named],
        affected: fn(&DB::QueryResult) -> u64,
    ) -> Result<(bool, Vec<(String, i64)>), sqlx::Error>
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
        let rows = sqlx::query::<DB>(AssertSqlSafe(self.read.as_str()))
            .bind(family)
            .bind(name)
            .fetch_all(&mut *tx)
            .await?;
        let done = sqlx::query::<DB>(AssertSqlSafe(leave))
            .bind(family)
            .bind(name)
            .bind(owner)
            .bind(token.to_i64())
            .execute(&mut *tx)
            .await?;
        let left = affected(&done) == 1;
        // No group row (never so while a holder's row is there):
        // nothing to count by, so nobody is admitted.
        if !left || rows.is_empty() {
            tx.commit().await?;
            return Ok((left, Vec::new()));
        }
        let (last_token, mut members) = read_members::<DB>(rows)?;
        members.retain(|m| m.owner != owner);
        let plan = plan(last_token, members, waiters);
        for (waiter, ttl_ms) in &plan.keep {
            sqlx::query::<DB>(AssertSqlSafe(self.extend.as_str()))
                .bind(*ttl_ms)
                .bind(family)
                .bind(name)
                .bind(*waiter)
                .execute(&mut *tx)
                .await?;
        }
        if plan.last_token != last_token {
            sqlx::query::<DB>(AssertSqlSafe(self.advance.as_str()))
                .bind(plan.last_token)
                .bind(family)
                .bind(name)
                .execute(&mut *tx)
                .await?;
        }
        if !plan.rows.is_empty() {
            let sql = self.put.rows(plan.rows.len());
            let mut put = sqlx::query::<DB>(AssertSqlSafe(sql.as_ref()));
            for row in &plan.rows {
                put = put
                    .bind(family)
                    .bind(name)
                    .bind(row.owner)
                    .bind(row.kind)
                    .bind(row.token)
                    .bind(row.ttl_ms);
            }
            put.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok((true, plan.admitted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::WAITING;
    use crate::handover::Side;

    fn named(owner: &str, side: Side) -> Named {
        Named {
            owner: owner.to_owned(),
            side,
            ttl_ms: 500,
        }
    }

    fn member(owner: &str, kind: &str, token: i64) -> Member {
        Member {
            owner: owner.into(),
            kind: kind.into(),
            token,
            live: true,
        }
    }

    #[test]
    fn readers_are_granted_in_one_advance_and_one_write() {
        let waiters = [named("a", Side::Read), named("b", Side::Read)];
        let plan = plan(7, Vec::new(), &waiters);
        assert_eq!(plan.last_token, 9);
        assert_eq!(plan.admitted, [("a".to_owned(), 8), ("b".to_owned(), 9)]);
        assert_eq!(plan.rows.len(), 2);
        assert!(plan.keep.is_empty());
    }

    #[test]
    fn a_writer_granted_keeps_the_readers_after_it_out() {
        let waiters = [named("w", Side::Write), named("r", Side::Read)];
        let plan = plan(3, vec![member("w", WAITING, 0)], &waiters);
        assert_eq!(plan.admitted, [("w".to_owned(), 4)]);
        assert_eq!(plan.rows.len(), 1, "the reader is refused: no row");
    }

    #[test]
    fn a_writer_refused_is_not_marked_and_a_holder_keeps_its_token() {
        let waiters = [named("r", Side::Read), named("w", Side::Write)];
        let plan = plan(5, vec![member("r", "read", 5)], &waiters);
        assert_eq!(plan.keep, [("r", 500)]);
        assert_eq!(plan.admitted, [("r".to_owned(), 5)]);
        assert_eq!(plan.last_token, 5, "no grant, no advance");
        assert!(plan.rows.is_empty(), "no mark for w: {:?}", plan.rows);
    }
}
