//! What the SQLite backend keeps in the database: the locks, holders,
//! groups and elections tables; made at start, or only looked for with
//! `create_tables=false`.

use lock_core::Result;
use sqlx::AssertSqlSafe;
use sqlx::sqlite::SqlitePool;

use crate::error::ErrorMap;
use crate::provision::Elections;

/// The locks table and its companions for semaphores, read-write locks
/// and elections.
pub(super) struct Tables<'a> {
    pub(super) locks: &'a str,
    pub(super) holders: &'a str,
    pub(super) groups: &'a str,
    pub(super) elections: &'a str,
}

impl Tables<'_> {
    /// Each table's name and the statement that makes it; the elections
    /// table last.
    fn creates(&self) -> [(&str, String); 4] {
        let (t, h, g, e) = (self.locks, self.holders, self.groups, self.elections);
        [
            (
                t,
                format!(
                    "CREATE TABLE IF NOT EXISTS {t} (
    name TEXT NOT NULL PRIMARY KEY,
    owner TEXT,
    version INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
)"
                ),
            ),
            (
                h,
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} (
    family TEXT NOT NULL,
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    kind TEXT NOT NULL,
    token INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (family, name, owner)
)"
                ),
            ),
            (
                g,
                format!(
                    "CREATE TABLE IF NOT EXISTS {g} (
    family TEXT NOT NULL,
    name TEXT NOT NULL,
    last_token INTEGER NOT NULL,
    PRIMARY KEY (family, name)
)"
                ),
            ),
            (
                e,
                format!(
                    "CREATE TABLE IF NOT EXISTS {e} (
    name TEXT NOT NULL PRIMARY KEY,
    owner TEXT,
    version INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    value TEXT NOT NULL
)"
                ),
            ),
        ]
    }
}

/// Makes the tables that are missing (`create`), or fails naming them.
pub(super) async fn prepare(
    pool: &SqlitePool,
    tables: &Tables<'_>,
    create: bool,
    errors: &ErrorMap,
) -> Result<()> {
    let creates = tables.creates();
    if create {
        // Idempotent, and safe when several processes run it at once:
        // SQLite serialises the writers and `IF NOT EXISTS` is checked
        // under the lock.
        let script: Vec<&str> = creates.iter().map(|(_, c)| c.as_str()).collect();
        return sqlx::raw_sql(AssertSqlSafe(script.join(";\n")))
            .execute(pool)
            .await
            .map(drop)
            .map_err(|e| errors.convert("create table", e));
    }
    let mut lacking = Vec::new();
    for (name, _) in &creates {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1 COLLATE NOCASE",
        )
        .bind(*name)
        .fetch_optional(pool)
        .await
        .map_err(|e| errors.convert("inspect table", e))?;
        if found.is_none() {
            lacking.push(format!("table {name}"));
        }
    }
    let (name, create) = &creates[3];
    let elections = Elections {
        lacking: &format!("table {name}"),
        create,
    };
    crate::provision::require(errors.backend, &lacking, elections, || {
        creates.iter().map(|(_, c)| c.clone()).collect()
    })
}
