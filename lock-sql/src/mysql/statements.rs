//! The statements for one table, as MySQL and MariaDB take them: each
//! answers through `LAST_INSERT_ID(expr)` (see `mysql.rs`).

use crate::admission::{Admission, Put};
use crate::statements::{Join, OneRow, Statements};

/// The database's clock in milliseconds; `NOW(3)` is fixed for the length of
/// one statement.
const NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

/// "The row may be taken": free, expired, or already ours. Evaluated against
/// the row as it is when the expression runs (see `acquire` below).
const TAKEABLE: &str = "(owner IS NULL OR expires_at <= NOW_MS OR owner = VALUES(owner))";

/// The statements of the mutex's rows in `t`, or (`valued`) of an
/// election's, whose acquire writes the candidate's value (the fourth `?`)
/// with the grant and whose holder query answers with it.
fn one_row(t: &str, valued: bool) -> OneRow {
    let takeable = TAKEABLE.replace("NOW_MS", NOW_MS);
    let (column, value, set, read) = match valued {
        true => (
            ", value",
            ", ?",
            format!("value = IF({takeable}, VALUES(value), value), "),
            ", value",
        ),
        false => Default::default(),
    };
    OneRow {
        // `last_insert_id` is the version when taken, 0 when not.
        //
        // MySQL evaluates `SET` assignments left to right, each seeing
        // the columns already assigned. So `version` goes first (it
        // needs the old owner), then the value and `owner` (still the old
        // expiry), then `expires_at`, whose test now sees our owner
        // exactly when the row was takeable. A fresh insert reports 1
        // from the `VALUES` row; on a duplicate, the update always
        // overrides it, with the new version or with 0.
        acquire: format!(
            "INSERT INTO {t} (name, owner, version, expires_at{column}) VALUES (?, ?, LAST_INSERT_ID(1), {NOW_MS} + ?{value})
                 ON DUPLICATE KEY UPDATE
                    version = IF({takeable},
                                 LAST_INSERT_ID(IF(owner <=> VALUES(owner), version, version + 1)),
                                 version + LAST_INSERT_ID(0)),
                    {set}owner = IF({takeable}, VALUES(owner), owner),
                    expires_at = IF({takeable}, VALUES(expires_at), expires_at)"
        ),
        renew: format!(
            "UPDATE {t} SET expires_at = {NOW_MS} + ?
                 WHERE name = ? AND owner = ? AND version = ? AND expires_at > {NOW_MS}"
        ),
        // No row matched when not ours, else `last_insert_id` 2 if the
        // lease still ran, 1 if it had run out.
        release: format!(
            "UPDATE {t} SET expires_at = expires_at + 0 * LAST_INSERT_ID(1 + (expires_at > {NOW_MS})), owner = NULL
                 WHERE name = ? AND owner = ? AND version = ?"
        ),
        abandon: format!("UPDATE {t} SET owner = NULL WHERE name = ? AND owner = ?"),
        holder: format!(
            "SELECT owner, version, expires_at - {NOW_MS}{read} FROM {t}
                 WHERE name = ? AND owner IS NOT NULL AND expires_at > {NOW_MS}"
        ),
    }
}

/// The statements for one table and its companions. Each answers as
/// `mysql.rs`'s `Dialect` reads it, and binds its `?` in the order they
/// stand, so the TTL comes first in `renew` and `renew_member`: `(ttl_ms,
/// name, owner, version)` and `(ttl_ms, family, name, owner, token)`.
pub(super) fn statements(t: &str, h: &str, g: &str, e: &str) -> Statements {
    let member = "family = ? AND name = ? AND owner = ? AND token = ? AND kind <> 'wait'";
    Statements {
        mutex: one_row(t, false),
        election: one_row(e, true),
        // Rows matched, not changed (sqlx asks for `CLIENT_FOUND_ROWS`):
        // proclaiming the same value again still answers one.
        proclaim: format!(
            "UPDATE {e} SET value = ?
                 WHERE name = ? AND owner = ? AND version = ? AND expires_at > {NOW_MS}"
        ),
        // READ COMMITTED for this one transaction: its locking reads
        // take record locks only, no gap locks, so admissions to two
        // different locks never block, nor deadlock, each other. The
        // reads that count are locking reads either way (see
        // `admission.rs`), which see the newest committed rows.
        join: Join::Transaction(Box::new(Admission {
            begin: "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
            lock: format!(
                "INSERT INTO {g} (family, name, last_token) VALUES (?, ?, 0)
                     ON DUPLICATE KEY UPDATE last_token = last_token"
            ),
            read: format!(
                "SELECT g.last_token, h.owner, h.kind, h.token, h.expires_at - {NOW_MS}
                     FROM {g} AS g LEFT JOIN {h} AS h ON h.family = g.family AND h.name = g.name
                     WHERE g.family = ? AND g.name = ?
                     FOR UPDATE"
            ),
            prune: format!(
                "DELETE FROM {h} WHERE family = ? AND name = ? AND expires_at <= {NOW_MS}"
            ),
            extend: format!(
                "UPDATE {h} SET expires_at = {NOW_MS} + ? WHERE family = ? AND name = ? AND owner = ?"
            ),
            advance: format!("UPDATE {g} SET last_token = ? WHERE family = ? AND name = ?"),
            put: Put::new(
                format!("INSERT INTO {h} (family, name, owner, kind, token, expires_at) VALUES"),
                format!("(?, ?, ?, ?, ?, {NOW_MS} + ?)"),
                "ON DUPLICATE KEY UPDATE
                    kind = VALUES(kind), token = VALUES(token), expires_at = VALUES(expires_at)"
                    .to_owned(),
            ),
        })),
        renew_member: format!(
            "UPDATE {h} SET expires_at = {NOW_MS} + ? WHERE {member} AND expires_at > {NOW_MS}"
        ),
        leave: format!("DELETE FROM {h} WHERE {member} AND expires_at > {NOW_MS}"),
        leave_all: format!("DELETE FROM {h} WHERE family = ? AND name = ? AND owner = ?"),
        leave_and_admit: None,
        is_member: format!("SELECT COUNT(*) FROM {h} WHERE {member} AND expires_at > {NOW_MS}"),
        members: format!(
            "SELECT owner, kind, token, expires_at - {NOW_MS} FROM {h}
                 WHERE family = ? AND name = ? AND kind <> 'wait' AND expires_at > {NOW_MS}
                 ORDER BY token"
        ),
    }
}
