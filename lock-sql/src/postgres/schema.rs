//! What the PostgreSQL backend keeps in the database: its schema if one is
//! named, the locks, holders, groups and elections tables, and its
//! functions (`functions.rs`); made at start, or only looked for with
//! `create_tables=false`.

use lock_core::Result;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use super::functions::Function;
use super::location::Location;
use crate::error::ErrorMap;
use crate::provision::Elections;

/// Makes what is missing (`create`), or fails naming it and the
/// statements an administrator can run: whether the leaving function can
/// be used. A database set up by an earlier lock-sql lacks it, and its
/// releases then leave as they did, with a warning.
pub(super) async fn prepare(
    pool: &PgPool,
    at: &Location,
    create: bool,
    errors: &ErrorMap,
) -> Result<bool> {
    let objects = Objects::of(at);
    if create {
        objects.create(pool, at, errors).await
    } else {
        objects.check(pool, errors).await
    }
}

/// Each object by its qualified name, with the statement that makes it.
struct Objects {
    schema: Option<String>,
    /// The elections table last.
    tables: [(String, String); 4],
    join: Function,
    leave: Function,
}

impl Objects {
    fn of(at: &Location) -> Self {
        let (t, h, g, e) = (
            at.qualified(),
            at.companion("holders"),
            at.companion("groups"),
            at.companion("elections"),
        );
        let tables = [
            (
                t.clone(),
                format!(
                    "CREATE TABLE IF NOT EXISTS {t} (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    owner CHAR(32),
    version BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
)"
                ),
            ),
            (
                h.clone(),
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} (
    family VARCHAR(8) NOT NULL,
    name VARCHAR(255) NOT NULL,
    owner CHAR(32) NOT NULL,
    kind VARCHAR(8) NOT NULL,
    token BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (family, name, owner)
)"
                ),
            ),
            (
                g.clone(),
                format!(
                    "CREATE TABLE IF NOT EXISTS {g} (
    family VARCHAR(8) NOT NULL,
    name VARCHAR(255) NOT NULL,
    last_token BIGINT NOT NULL,
    PRIMARY KEY (family, name)
)"
                ),
            ),
            (
                e.clone(),
                format!(
                    "CREATE TABLE IF NOT EXISTS {e} (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    owner CHAR(32),
    version BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    value TEXT NOT NULL
)"
                ),
            ),
        ];
        Self {
            schema: at
                .schema
                .as_ref()
                .map(|s| format!("CREATE SCHEMA IF NOT EXISTS {}", s.as_str())),
            tables,
            join: Function::join(at.companion("join"), &h, &g),
            leave: Function::leave(
                at.companion("leave"),
                &at.companion("join"),
                &h,
                &g,
                &at.channel(),
            ),
        }
    }

    /// Every statement, in order.
    fn script(&self) -> Vec<String> {
        let mut script: Vec<String> = self.schema.iter().cloned().collect();
        script.extend(self.tables.iter().map(|(_, create)| create.clone()));
        script.extend([self.join.create(), self.leave.create()]);
        script
    }

    /// `CREATE TABLE IF NOT EXISTS` alone is not safe when two sessions
    /// race (both may try to create the row type); a transaction-scoped
    /// advisory lock on the table's name serialises them.
    async fn create(&self, pool: &PgPool, at: &Location, errors: &ErrorMap) -> Result<bool> {
        let map = |e| errors.convert("create table", e);
        let mut tx = pool.begin().await.map_err(map)?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(format!("distlock:{}", at.qualified()))
            .execute(&mut *tx)
            .await
            .map_err(map)?;
        for create in self.schema.iter().chain(self.tables.iter().map(|(_, c)| c)) {
            sqlx::query(AssertSqlSafe(create.clone()))
                .execute(&mut *tx)
                .await
                .map_err(map)?;
        }
        // Replacing a function takes its owner, and invalidates the plans
        // of every session calling it: only done when ours is missing or
        // differs, so that other database users (and every later start)
        // leave it be.
        let mut executable = true;
        for function in [&self.join, &self.leave] {
            match installed(&mut *tx, function, errors, "create table").await? {
                // Another user's with our source, which this one may not
                // execute where its EXECUTE was revoked from PUBLIC.
                Some(found) if found.body == function.body => executable = found.executable,
                // Made now by this user, its owner.
                _ => {
                    sqlx::query(AssertSqlSafe(function.create()))
                        .execute(&mut *tx)
                        .await
                        .map_err(map)?;
                    executable = true;
                }
            }
        }
        tx.commit().await.map_err(map)?;
        // Whether the leaving function, the last made, can be used.
        Ok(executable)
    }

    /// `to_regclass` finds a table whatever the caller's rights on it, so a
    /// user without them gets past here and is refused by each operation.
    async fn check(&self, pool: &PgPool, errors: &ErrorMap) -> Result<bool> {
        let mut lacking = Vec::new();
        for (name, _) in &self.tables {
            let found: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::TEXT")
                .bind(name)
                .fetch_one(pool)
                .await
                .map_err(|e| errors.convert("inspect table", e))?;
            if found.is_none() {
                lacking.push(format!("table {name}"));
            }
        }
        let join = installed(pool, &self.join, errors, "inspect table").await?;
        match join {
            None => lacking.push(format!("function {}", self.join.signature())),
            // Another lock-sql version's, as in a rolling upgrade: used as
            // it is (its arguments are the same), since instances of both
            // versions share it until the last one is upgraded.
            Some(join) if join.body != self.join.body => tracing::warn!(
                function = %self.join.name,
                "the admitting function was made by another version of lock-sql; \
                 an administrator can replace it with the statements create_tables=false \
                 prints when it is missing"
            ),
            Some(_) => {}
        }
        let leave = installed(pool, &self.leave, errors, "inspect table").await?;
        let (name, create) = &self.tables[3];
        let elections = Elections {
            lacking: &format!("table {name}"),
            create,
        };
        crate::provision::require(errors.backend, &lacking, elections, || self.script())?;
        Ok(match leave {
            Some(leave) if leave.executable => {
                if leave.body != self.leave.body {
                    tracing::warn!(
                        function = %self.leave.name,
                        "the leaving function was made by another version of lock-sql; \
                         an administrator can replace it with the statements create_tables=false \
                         prints when it is missing"
                    );
                }
                true
            }
            found => {
                let grant = match found {
                    None => format!("{};\n\n", self.leave.create()),
                    Some(_) => String::new(),
                };
                tracing::warn!(
                    function = %self.leave.name,
                    "create_tables=false, and the database lacks the leaving function, or this \
                     user may not execute it: read-write locks work, but a release does not \
                     admit this backend's waiters itself, so each changes sides a round trip \
                     later. An administrator can run:\n\n{grant}GRANT EXECUTE ON FUNCTION {} TO \
                     <the application's user>;",
                    self.leave.signature(),
                );
                false
            }
        })
    }
}

/// A function of ours as the database has it.
struct Installed {
    body: String,
    /// Whether the current user may execute it.
    executable: bool,
}

/// `function` as the database has it, if it has it.
async fn installed(
    conn: impl sqlx::PgExecutor<'_>,
    function: &Function,
    errors: &ErrorMap,
    operation: &'static str,
) -> Result<Option<Installed>> {
    let found: Option<(String, bool)> = sqlx::query_as(
        "SELECT prosrc, has_function_privilege(oid, 'EXECUTE') FROM pg_proc
         WHERE oid = to_regprocedure($1)",
    )
    .bind(function.signature())
    .fetch_optional(conn)
    .await
    .map_err(|e| errors.convert(operation, e))?;
    Ok(found.map(|(body, executable)| Installed { body, executable }))
}
