//! What the PostgreSQL backend keeps in the database: its schema if one is
//! named, the locks, holders, groups and elections tables, and the function that
//! admits holders; made at start, or only looked for with
//! `create_tables=false`.

use lock_core::Result;
use lock_core::backend::AcquireRequest;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use super::location::Location;
use crate::error::ErrorMap;
use crate::provision::Elections;

/// The types of the admitting function's arguments, as `to_regprocedure`
/// and `GRANT EXECUTE` name them.
const ARGUMENTS: &str = "(TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT)";

/// Makes what is missing (`create`), or fails naming it and the
/// statements an administrator can run.
pub(super) async fn prepare(
    pool: &PgPool,
    at: &Location,
    create: bool,
    errors: &ErrorMap,
) -> Result<()> {
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
    function: String,
    /// The function's PL/pgSQL source, as `pg_proc.prosrc` keeps it.
    body: String,
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
            function: at.companion("join"),
            body: admission(&h, &g),
        }
    }

    fn create_function(&self) -> String {
        format!(
            "CREATE OR REPLACE FUNCTION {}(
    p_family TEXT, p_name TEXT, p_owner TEXT, p_kind TEXT, p_permits BIGINT, p_ttl_ms BIGINT
) RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $distlock${}$distlock$",
            self.function, self.body
        )
    }

    /// Every statement, in order.
    fn script(&self) -> Vec<String> {
        let mut script: Vec<String> = self.schema.iter().cloned().collect();
        script.extend(self.tables.iter().map(|(_, create)| create.clone()));
        script.push(self.create_function());
        script
    }

    /// The function's source as the database has it, if it has one.
    async fn installed_body(
        &self,
        conn: impl sqlx::PgExecutor<'_>,
        errors: &ErrorMap,
        operation: &'static str,
    ) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)")
            .bind(format!("{}{ARGUMENTS}", self.function))
            .fetch_optional(conn)
            .await
            .map_err(|e| errors.convert(operation, e))
    }

    /// `CREATE TABLE IF NOT EXISTS` alone is not safe when two sessions
    /// race (both may try to create the row type); a transaction-scoped
    /// advisory lock on the table's name serialises them.
    async fn create(&self, pool: &PgPool, at: &Location, errors: &ErrorMap) -> Result<()> {
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
        let installed = self
            .installed_body(&mut *tx, errors, "create table")
            .await?;
        if installed.as_deref() != Some(self.body.as_str()) {
            sqlx::query(AssertSqlSafe(self.create_function()))
                .execute(&mut *tx)
                .await
                .map_err(map)?;
        }
        tx.commit().await.map_err(map)
    }

    /// `to_regclass` finds a table whatever the caller's rights on it, so a
    /// user without them gets past here and is refused by each operation.
    async fn check(&self, pool: &PgPool, errors: &ErrorMap) -> Result<()> {
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
        match self.installed_body(pool, errors, "inspect table").await? {
            None => lacking.push(format!("function {}{ARGUMENTS}", self.function)),
            // Another lock-sql version's, as in a rolling upgrade: used as
            // it is (its arguments are the same), since instances of both
            // versions share it until the last one is upgraded.
            Some(body) if body != self.body => tracing::warn!(
                function = %self.function,
                "the admitting function was made by another version of lock-sql; \
                 an administrator can replace it with the statements create_tables=false \
                 prints when it is missing"
            ),
            Some(_) => {}
        }
        let (name, create) = &self.tables[3];
        let elections = Elections {
            lacking: &format!("table {name}"),
            create,
        };
        crate::provision::require(errors.backend, &lacking, elections, || self.script())
    }
}

/// The source of the function that admits a holder to a group (replaced
/// when its source differs, so a newer lock-sql brings its own).
///
/// The function is where the counting is made safe. Under READ COMMITTED,
/// one statement reads every table from the snapshot it started with, even
/// after it waited for a row lock: a single statement that locked the
/// group's row and then counted holders could count them as they were
/// before an admission it waited for committed. In a PL/pgSQL function
/// each statement takes a fresh snapshot, so the count, made after the
/// statement that locked the group's row, sees every admission before it.
/// Deleting the expired rows first waits for a renewal in flight on them
/// and re-checks the expiry it committed. Under REPEATABLE READ or
/// SERIALIZABLE (a pool that sets them) the snapshot is the transaction's,
/// and the lock on a group's row that changed since makes the statement
/// fail with a serialization error, which is retried: never a wrong count.
fn admission(h: &str, g: &str) -> String {
    let same_group = "family = p_family AND name = p_name";
    let mark_ms = crate::client::ttl_ms(AcquireRequest::WRITER_MARK);
    format!(
        "
            DECLARE
                v_until TIMESTAMPTZ := now() + p_ttl_ms * INTERVAL '1 millisecond';
                v_token BIGINT;
                v_free BOOLEAN;
            BEGIN
                INSERT INTO {g} AS g (family, name, last_token) VALUES (p_family, p_name, 0)
                ON CONFLICT (family, name) DO UPDATE SET last_token = g.last_token;
                DELETE FROM {h} WHERE {same_group} AND expires_at <= now();
                UPDATE {h} SET expires_at = v_until
                WHERE {same_group} AND owner = p_owner AND kind <> 'wait'
                RETURNING token INTO v_token;
                IF FOUND THEN
                    RETURN v_token;
                END IF;
                IF p_kind = 'permit' THEN
                    SELECT count(*) < p_permits INTO v_free FROM {h}
                    WHERE {same_group} AND kind <> 'wait';
                ELSIF p_kind = 'read' THEN
                    SELECT NOT EXISTS (
                        SELECT 1 FROM {h} WHERE {same_group} AND kind IN ('write', 'wait')
                    ) INTO v_free;
                ELSE
                    SELECT NOT EXISTS (
                        SELECT 1 FROM {h} WHERE {same_group} AND kind <> 'wait'
                    ) INTO v_free;
                END IF;
                IF NOT v_free THEN
                    -- Nothing here needs to survive a crash (expired rows,
                    -- a waiting writer's row it writes again at its next
                    -- attempt), so the group's row is let go without
                    -- waiting for the disk.
                    PERFORM set_config('synchronous_commit', 'off', true);
                    IF p_kind = 'write' THEN
                        INSERT INTO {h} (family, name, owner, kind, token, expires_at)
                        VALUES (p_family, p_name, p_owner, 'wait', 0,
                                GREATEST(v_until, now() + {mark_ms} * INTERVAL '1 millisecond'))
                        ON CONFLICT (family, name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;
                    END IF;
                    RETURN NULL;
                END IF;
                UPDATE {g} SET last_token = last_token + 1 WHERE {same_group}
                RETURNING last_token INTO v_token;
                INSERT INTO {h} (family, name, owner, kind, token, expires_at)
                VALUES (p_family, p_name, p_owner, p_kind, v_token, v_until)
                ON CONFLICT (family, name, owner) DO UPDATE SET
                    kind = EXCLUDED.kind, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at;
                RETURN v_token;
            END
            "
    )
}
