//! PostgreSQL: one statement per operation, and `LISTEN/NOTIFY` so a release
//! wakes waiters in every process at once.
//!
//! Release and its notification are one statement (`pg_notify` in a CTE over
//! the `UPDATE … RETURNING`), so a notice is sent exactly when a lock was
//! freed. Each backend instance keeps one listening connection; waiters still
//! poll, rarely, in case a notice is lost while that connection reconnects.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::AcquireRequest;
use lock_core::secret::read_password_file;
use lock_core::{Capabilities, Fencing, LockName, Result};
use sqlx::AssertSqlSafe;
use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};

use crate::backend::{SqlBackend, within};
use crate::config::ServerOptions;
use crate::error::ErrorMap;
use crate::pool::Checked;
use crate::returning::{Join, ReturningDriver, Statements};
use crate::signals::Signals;
use crate::table::TableName;

mod config;
pub(crate) use config::Config;

/// With notifications, polling is only a safety net.
const POLL_CAP: Duration = Duration::from_millis(500);

const CAPABILITIES: Capabilities = Capabilities::new(crate::POSTGRES_NAME, Fencing::Strict)
    .with_server_side_wait(true)
    .with_semaphores(true)
    .with_read_write(true);

/// Where the locks table lives: `schema.table`, or `table` on the search path.
#[derive(Debug)]
struct Location {
    schema: Option<TableName>,
    table: TableName,
}

impl Location {
    fn qualified(&self) -> String {
        self.in_schema(self.table.as_str())
    }

    /// A companion of the locks table (its holders, its groups, the
    /// function that admits holders), in the same schema.
    fn companion(&self, suffix: &str) -> String {
        self.in_schema(&self.table.companion(suffix))
    }

    fn in_schema(&self, object: &str) -> String {
        match &self.schema {
            Some(s) => format!("{}.{object}", s.as_str()),
            None => object.to_owned(),
        }
    }

    /// The notification channel. Channel names are cut at 63 bytes by the
    /// server; two tables sharing a channel only cost a spurious wake-up.
    fn channel(&self) -> String {
        let mut channel = format!("distlock_{}", self.qualified());
        channel.truncate(63);
        channel
    }
}

pub(crate) fn transient(e: &dyn DatabaseError) -> bool {
    // Class 08 (connection), 40 (serialization/deadlock), 53 (resources),
    // 57 (operator intervention: shutdown, statement timeout).
    e.code().is_some_and(|c| {
        ["08", "40", "53", "57"]
            .iter()
            .any(|class| c.starts_with(class))
    })
}

/// Connects to the database `config` names, creating the table if it is
/// missing, and starts listening for releases.
pub(crate) async fn connect(config: Config) -> Result<SqlBackend> {
    let Config {
        server,
        location,
        mut options,
    } = config;
    let ServerOptions {
        common,
        password_file,
        tls,
        ..
    } = server;
    options = crate::tls::postgres(&tls, options)?;
    if let Some(path) = password_file {
        options = options.password(&read_password_file(crate::POSTGRES_NAME, &path)?);
    }
    let errors = ErrorMap {
        backend: crate::POSTGRES_NAME,
        pool_timeout: common.connect_timeout,
    };
    let pool = PgPoolOptions::new()
        .max_connections(common.pool_size)
        // One round trip per operation: no ping before each statement. A
        // dead connection surfaces as a retryable error instead.
        .test_before_acquire(false)
        .acquire_timeout(common.connect_timeout)
        .connect_with(options.clone())
        .await
        .map_err(|e| errors.convert("connect", e))?;
    start(pool, location, common.timeout, errors, options).await
}

/// A backend on a pool the application made (see the crate docs). The
/// listener gets a connection of its own, opened with the pool's options:
/// one taken from the pool for good would leave a pool of one connection
/// none for the statements.
pub(crate) async fn from_pool(pool: PgPool, options: Checked) -> Result<SqlBackend> {
    let errors = crate::pool::errors(crate::POSTGRES_NAME, &pool);
    let location = Location {
        schema: options.schema,
        table: options.table,
    };
    let listen_with = PgConnectOptions::clone(&pool.connect_options());
    start(pool, location, options.timeout, errors, listen_with).await
}

/// Creates the table if it is missing, reads its name column's size, and
/// makes the backend, listening for releases on a connection opened with
/// `listen_with`.
async fn start(
    pool: PgPool,
    location: Location,
    timeout: Duration,
    errors: ErrorMap,
    listen_with: PgConnectOptions,
) -> Result<SqlBackend> {
    let limit = SqlBackend::client_limit(timeout);
    within(
        limit,
        "create table",
        create_table(&pool, &location, &errors),
    )
    .await?;
    let name_limit = within(
        limit,
        "inspect table",
        name_column_size(&pool, &location, &errors),
    )
    .await?;
    let listener = within(limit, "listen", async {
        Ok(listen(listen_with, &location.channel()).await)
    })
    .await
    .unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot LISTEN for releases; waiters will poll");
        None
    });
    let driver = ReturningDriver {
        pool,
        sql: statements(&location),
        errors,
        capabilities: CAPABILITIES,
    };
    let backend = SqlBackend::new(driver, timeout).with_name_limit(name_limit);
    Ok(match listener {
        Some(listener) => {
            let task = tokio::spawn(forward_notices(listener, backend.signals()));
            backend.with_listener(task, POLL_CAP)
        }
        None => backend,
    })
}

/// `CREATE TABLE IF NOT EXISTS` alone is not safe when two sessions race
/// (both may try to create the row type); a transaction-scoped advisory lock
/// on the table's name serialises them.
async fn create_table(pool: &PgPool, at: &Location, errors: &ErrorMap) -> Result<()> {
    let t = at.qualified();
    let map = |e| errors.convert("create table", e);
    let mut tx = pool.begin().await.map_err(map)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(format!("distlock:{t}"))
        .execute(&mut *tx)
        .await
        .map_err(map)?;
    if let Some(schema) = &at.schema {
        let create = format!("CREATE SCHEMA IF NOT EXISTS {}", schema.as_str());
        sqlx::query(AssertSqlSafe(create))
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {t} (
            name VARCHAR(255) NOT NULL PRIMARY KEY,
            owner CHAR(32),
            version BIGINT NOT NULL,
            expires_at TIMESTAMPTZ NOT NULL
        )"
    );
    sqlx::query(AssertSqlSafe(create))
        .execute(&mut *tx)
        .await
        .map_err(map)?;
    let groups = create_groups(at);
    for create in groups.tables {
        sqlx::query(AssertSqlSafe(create))
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    // Replacing a function takes its owner, and invalidates the plans of
    // every session calling it: only done when ours is missing or differs,
    // so that other database users (and every later start) leave it be.
    let existing: Option<String> =
        sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)")
            .bind(format!(
                "{}(TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT)",
                groups.function
            ))
            .fetch_optional(&mut *tx)
            .await
            .map_err(map)?;
    if existing.as_deref() != Some(groups.body.as_str()) {
        let create = format!(
            "CREATE OR REPLACE FUNCTION {}(
                p_family TEXT, p_name TEXT, p_owner TEXT, p_kind TEXT, p_permits BIGINT, p_ttl_ms BIGINT
             ) RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $distlock${}$distlock$",
            groups.function, groups.body
        );
        sqlx::query(AssertSqlSafe(create))
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    tx.commit().await.map_err(map)
}

/// What semaphores and read-write locks need in the database.
struct GroupObjects {
    /// `CREATE TABLE IF NOT EXISTS` of the holders and groups tables.
    tables: [String; 2],
    /// The admitting function's name, in its schema.
    function: String,
    /// Its PL/pgSQL source, as `pg_proc.prosrc` keeps it.
    body: String,
}

/// The holders table, the groups table and the function that admits a
/// holder (replaced when its source differs, so a newer lock-sql brings
/// its own).
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
fn create_groups(at: &Location) -> GroupObjects {
    let (h, g, f) = (
        at.companion("holders"),
        at.companion("groups"),
        at.companion("join"),
    );
    let same_group = "family = p_family AND name = p_name";
    let tables = [
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
        format!(
            "CREATE TABLE IF NOT EXISTS {g} (
                family VARCHAR(8) NOT NULL,
                name VARCHAR(255) NOT NULL,
                last_token BIGINT NOT NULL,
                PRIMARY KEY (family, name)
            )"
        ),
    ];
    let mark_ms = crate::backend::ttl_ms(AcquireRequest::WRITER_MARK);
    let body = format!(
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
    );
    GroupObjects {
        tables,
        function: f,
        body,
    }
}

/// How long a name the table's `name` column takes (a table made by somebody
/// else may be narrower than ours).
async fn name_column_size(pool: &PgPool, at: &Location, errors: &ErrorMap) -> Result<usize> {
    let size: Option<i32> = sqlx::query_scalar(
        "SELECT character_maximum_length FROM information_schema.columns
         WHERE table_schema = COALESCE($1, current_schema()) AND table_name = $2 AND column_name = 'name'",
    )
    .bind(at.schema.as_ref().map(TableName::as_str))
    .bind(at.table.as_str())
    .fetch_optional(pool)
    .await
    .map_err(|e| errors.convert("inspect table", e))?
    .flatten();
    Ok(size
        .and_then(|s| usize::try_from(s).ok())
        .unwrap_or(LockName::MAX_LEN))
}

/// A listening connection, or `None` (with a warning) if it cannot be had:
/// waiters then fall back to polling. It has a pool of its own: a listener
/// keeps its connection for good, and must not take one of the statements'.
async fn listen(options: PgConnectOptions, channel: &str) -> Option<PgListener> {
    let attempt = async {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options);
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(channel).await?;
        Ok::<_, sqlx::Error>(listener)
    };
    match attempt.await {
        Ok(listener) => Some(listener),
        Err(e) => {
            tracing::warn!(error = %e, "cannot LISTEN for releases; waiters will poll");
            None
        }
    }
}

/// Wakes a local waiter for every release notice. `recv` reconnects by
/// itself after a dropped connection; notices sent meanwhile are lost, which
/// the waiters' polling covers.
async fn forward_notices(mut listener: PgListener, signals: Arc<Signals>) {
    loop {
        match listener.recv().await {
            Ok(notice) => signals.wake_for_notice(notice.payload()),
            Err(e) => {
                tracing::debug!(error = %e, "release listener lost its connection; reconnecting");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn statements(at: &Location) -> Statements {
    let t = at.qualified();
    let (h, f) = (at.companion("holders"), at.companion("join"));
    let channel = at.channel();
    let member = "family = $1 AND name = $2 AND owner = $3 AND token = $4 AND kind <> 'wait'";
    let ttl = "$3::BIGINT * INTERVAL '1 millisecond'";
    Statements {
        acquire: format!(
            "INSERT INTO {t} AS l (name, owner, version, expires_at) VALUES ($1, $2, 1, now() + {ttl})
             ON CONFLICT (name) DO UPDATE SET
                version = CASE WHEN l.owner IS NOT DISTINCT FROM EXCLUDED.owner THEN l.version ELSE l.version + 1 END,
                owner = EXCLUDED.owner,
                expires_at = EXCLUDED.expires_at
             WHERE l.owner IS NULL OR l.expires_at <= now() OR l.owner = EXCLUDED.owner
             RETURNING version"
        ),
        renew: format!(
            "UPDATE {t} SET expires_at = now() + $4::BIGINT * INTERVAL '1 millisecond'
             WHERE name = $1 AND owner = $2 AND version = $3 AND expires_at > now()"
        ),
        release: format!(
            "WITH freed AS (
                UPDATE {t} SET owner = NULL
                WHERE name = $1 AND owner = $2 AND version = $3
                RETURNING name, expires_at > now() AS in_time
             )
             SELECT in_time, pg_notify('{channel}', name) FROM freed"
        ),
        abandon: format!(
            "WITH freed AS (UPDATE {t} SET owner = NULL WHERE name = $1 AND owner = $2 RETURNING name)
             SELECT pg_notify('{channel}', name) FROM freed"
        ),
        holder: format!(
            "SELECT owner, version, (EXTRACT(EPOCH FROM expires_at - now()) * 1000)::BIGINT FROM {t}
             WHERE name = $1 AND owner IS NOT NULL AND expires_at > now()"
        ),
        join: Join::Function(format!("SELECT {f}($1, $2, $3, $4, $5, $6)")),
        renew_member: format!(
            "UPDATE {h} SET expires_at = now() + $5::BIGINT * INTERVAL '1 millisecond'
             WHERE {member} AND expires_at > now()"
        ),
        // The notice's payload is the family's tag, a space and the name
        // (see `Signals::wake_for_notice`).
        leave: format!(
            "WITH gone AS (
                DELETE FROM {h} WHERE {member} AND expires_at > now()
                RETURNING family, name
             )
             SELECT pg_notify('{channel}', family || ' ' || name) FROM gone"
        ),
        leave_all: format!(
            "WITH gone AS (
                DELETE FROM {h} WHERE family = $1 AND name = $2 AND owner = $3
                RETURNING family, name
             )
             SELECT pg_notify('{channel}', family || ' ' || name) FROM gone"
        ),
        is_member: format!("SELECT COUNT(*) FROM {h} WHERE {member} AND expires_at > now()"),
    }
}
