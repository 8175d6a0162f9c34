//! PostgreSQL: one statement per operation, and `LISTEN/NOTIFY` so a release
//! wakes waiters in every process at once.
//!
//! Release and its notification are one statement (`pg_notify` in a CTE over
//! the `UPDATE … RETURNING`), so a notice is sent exactly when a lock was
//! freed. Each backend instance keeps one listening connection; waiters still
//! poll, rarely, in case a notice is lost while that connection reconnects.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Family;
use lock_core::{Capabilities, Fencing, LockName, Result};
use sqlx::postgres::{
    PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgQueryResult, Postgres,
};

use crate::client::{client_limit, within};
use crate::config::Checked;
use crate::config::postgres::Config;
use crate::driver::Opened;
use crate::error::ErrorMap;
use crate::names::POSTGRES_NAME;
use crate::runner::{Dialect, SqlDriver};
use crate::signals::{LEADER_NOTICE, Signals};
use crate::statements::{Join, OneRow, Statements};
use crate::table::TableName;

mod functions;
mod location;
mod schema;
use location::Location;

/// With notifications, polling is only a safety net.
const POLL_CAP: Duration = Duration::from_millis(500);

const CAPABILITIES: Capabilities = Capabilities::new(POSTGRES_NAME, Fencing::Strict)
    .with_server_side_wait(true)
    .with_semaphores(true)
    .with_read_write(true)
    .with_elections(true);

/// Connects to the database `config` names, with the common options
/// `common`, creating the table if it is missing, and starts listening for
/// releases.
pub(crate) async fn connect(config: Config, common: Checked) -> Result<Opened> {
    let options = config.connect_options(common.timeout)?;
    let errors = ErrorMap {
        backend: POSTGRES_NAME,
        pool_timeout: common.connect_timeout,
    };
    let pool = common
        .pool_options::<Postgres>()
        .connect_with(options.clone())
        .await
        .map_err(|e| errors.convert("connect", e))?;
    start(pool, Setup::from(common), errors, options).await
}

/// A backend on a pool the application made (see the crate docs). The
/// listener gets a connection of its own, opened with the pool's options:
/// one taken from the pool for good would leave a pool of one connection
/// none for the statements.
pub(crate) async fn from_pool(pool: PgPool, options: Checked) -> Result<Opened> {
    let errors = ErrorMap::of_pool(POSTGRES_NAME, &pool);
    let listen_with = PgConnectOptions::clone(&pool.connect_options());
    start(pool, Setup::from(options), errors, listen_with).await
}

/// What [`start`] needs beside the pool, whichever way it was made.
struct Setup {
    location: Location,
    timeout: Duration,
    create_tables: bool,
}

impl From<Checked> for Setup {
    fn from(options: Checked) -> Self {
        Self {
            location: Location {
                schema: options.schema,
                table: options.table,
            },
            timeout: options.timeout,
            create_tables: options.create_tables,
        }
    }
}

/// Creates the tables if they are missing (or checks they are there),
/// reads the name column's size, and makes the backend, listening for
/// releases on a connection opened with `listen_with`.
async fn start(
    pool: PgPool,
    setup: Setup,
    errors: ErrorMap,
    listen_with: PgConnectOptions,
) -> Result<Opened> {
    let Setup {
        location,
        timeout,
        create_tables,
    } = setup;
    let limit = client_limit(timeout);
    let leaving = within(
        limit,
        "create table",
        schema::prepare(&pool, &location, create_tables, &errors),
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
    let driver = SqlDriver {
        pool,
        sql: statements(&location, leaving),
        errors,
        capabilities: CAPABILITIES,
        writes: None,
    };
    let opened = Opened::new(driver, timeout).with_name_limit(name_limit);
    Ok(match listener {
        Some(listener) => {
            let task = tokio::spawn(forward_notices(listener, opened.signals.clone()));
            opened.with_listener(task, POLL_CAP)
        }
        None => opened,
    })
}

impl Dialect for Postgres {
    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
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

/// The statements of the mutex's rows in `t`, or (`election`) of an
/// election's. An election's acquire writes the candidate's value (`$4`)
/// with the grant and tells listeners ([`LEADER_NOTICE`]) that the leader
/// changed; its holder query answers with the value; its release and
/// abandon notices carry the family's tag.
fn one_row(t: &str, channel: &str, election: bool) -> OneRow {
    let (column, value, set, read) = match election {
        true => (", value", ", $4", ", value = EXCLUDED.value", ", value"),
        false => Default::default(),
    };
    let freed = match election {
        true => format!("'{} ' || name", Family::Election.tag()),
        false => "name".to_owned(),
    };
    let upsert = format!(
        "INSERT INTO {t} AS l (name, owner, version, expires_at{column}) VALUES ($1, $2, 1, now() + $3::BIGINT * INTERVAL '1 millisecond'{value})
             ON CONFLICT (name) DO UPDATE SET
                version = CASE WHEN l.owner IS NOT DISTINCT FROM EXCLUDED.owner THEN l.version ELSE l.version + 1 END,
                owner = EXCLUDED.owner,
                expires_at = EXCLUDED.expires_at{set}
             WHERE l.owner IS NULL OR l.expires_at <= now() OR l.owner = EXCLUDED.owner"
    );
    let acquire = match election {
        true => format!(
            "WITH taken AS ({upsert}
             RETURNING name, version)
             SELECT version, pg_notify('{channel}', '{LEADER_NOTICE} ' || name) FROM taken"
        ),
        false => format!("{upsert} RETURNING version"),
    };
    OneRow {
        acquire,
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
             SELECT in_time, pg_notify('{channel}', {freed}) FROM freed"
        ),
        abandon: format!(
            "WITH freed AS (UPDATE {t} SET owner = NULL WHERE name = $1 AND owner = $2 RETURNING name)
             SELECT pg_notify('{channel}', {freed}) FROM freed"
        ),
        holder: format!(
            "SELECT owner, version, (EXTRACT(EPOCH FROM expires_at - now()) * 1000)::BIGINT{read} FROM {t}
             WHERE name = $1 AND owner IS NOT NULL AND expires_at > now()"
        ),
    }
}

fn statements(at: &Location, leaving: bool) -> Statements {
    let t = at.qualified();
    let (h, f, e) = (
        at.companion("holders"),
        at.companion("join"),
        at.companion("elections"),
    );
    let channel = at.channel();
    let member = "family = $1 AND name = $2 AND owner = $3 AND token = $4 AND kind <> 'wait'";
    Statements {
        mutex: one_row(&t, &channel, false),
        election: one_row(&e, &channel, true),
        proclaim: format!(
            "WITH told AS (
                UPDATE {e} SET value = $1
                WHERE name = $2 AND owner = $3 AND version = $4 AND expires_at > now()
                RETURNING name
             )
             SELECT pg_notify('{channel}', '{LEADER_NOTICE} ' || name) FROM told"
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
        leave_and_admit: leaving.then(|| {
            format!(
                "SELECT w_owner, w_token FROM {}($1, $2, $3, $4, $5)",
                at.companion("leave")
            )
        }),
        is_member: format!("SELECT COUNT(*) FROM {h} WHERE {member} AND expires_at > now()"),
        members: format!(
            "SELECT owner, kind, token, (EXTRACT(EPOCH FROM expires_at - now()) * 1000)::BIGINT
             FROM {h} WHERE family = $1 AND name = $2 AND kind <> 'wait' AND expires_at > now()
             ORDER BY token"
        ),
    }
}
