//! Faults of real PostgreSQL and MariaDB servers and of their set-up: a
//! restart while a lease is held, an acquire held up by another session's
//! row lock, an unreachable server, a wrong password, a table made by
//! somebody else with a narrower name column. Faults of the network between
//! the backend and its server are in `sql_network.rs`. The test that
//! restarts its server gets a server of its own; the others share one.

mod common {
    pub(crate) mod sql;
}

use std::time::Duration;

use common::sql::{locker, on_postgres_and_mariadb, opts};
use conformance_tests::servers::SqlServer;
use conformance_tests::targets::fresh_table;
use lock_core::{Error, LockState, Wait};
use tokio::time::{Instant, sleep, timeout};

/// The server restarts while a lease is held: the lease survives (renewal
/// resumes) or is reported lost, and nobody else is granted the lock while
/// it is valid. Versions survive the restart.
async fn restart_while_held(server: &dyn SqlServer) {
    let url = server.url(&format!(
        "table={}&timeout=1s&connect_timeout=1s",
        fresh_table()
    ));
    let (a, b) = (locker(&url).await, locker(&url).await);
    let ttl = Duration::from_secs(6);
    let guard = a
        .lock_with("restart", opts(ttl, Wait::No))
        .await
        .expect("free lock");
    let first = guard.token();
    server.process().stop();
    match b.try_lock("restart").await {
        Err(e) => assert!(
            e.is_retryable(),
            "a stopped server is a retryable error: {e}"
        ),
        Ok(got) => panic!("acquired from a stopped server: {got:?}"),
    }
    server.process().restart();
    server.wait_ready().await;
    // Watch the lock for a whole TTL after the restart.
    let watch_until = Instant::now() + ttl;
    while Instant::now() < watch_until {
        if let Ok(second) = b.try_lock("restart").await {
            let lease = guard.lease();
            assert!(
                guard.state() == LockState::Lost || lease.is_expired(),
                "a second holder was granted while the first lease was valid ({:?} left)",
                lease.remaining()
            );
            assert!(second.token() > first, "versions survive the restart");
            second.release().await.expect("release");
            return;
        }
        sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        guard.state(),
        LockState::Held,
        "renewal resumed after the restart"
    );
    guard
        .release()
        .await
        .expect("the lease survived the restart");
    let next = b.try_lock("restart").await.expect("free after release");
    assert!(next.token() > first, "versions survive the restart");
    next.release().await.expect("release");
}
/// An acquire stuck behind a row lock another session holds: the caller
/// gets an error, the server itself stops the statement (so it cannot take
/// the row once the row lock goes), and no owner nobody has is left holding
/// the lock.
async fn acquire_behind_a_row_lock(server: &dyn SqlServer) {
    let table = fresh_table();
    let query = format!("table={table}&timeout=1s&connect_timeout=1s");
    let l = locker(&server.url(&query)).await;
    l.try_lock("row")
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
    let mut raw = RawSession::connect(server).await;
    raw.execute("BEGIN").await;
    raw.execute(&format!(
        "SELECT version FROM {table} WHERE name = 'row' FOR UPDATE"
    ))
    .await;

    let started = Instant::now();
    match l
        .lock_with("row", opts(Duration::from_secs(60), Wait::No))
        .await
    {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(g) => panic!("acquired a row another session has locked: {g:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "bounded by the timeout, took {:?}",
        started.elapsed()
    );
    timeout(Duration::from_secs(10), async {
        while raw.acquires_waiting(&table).await > 0 {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the server stops an acquire stuck behind a row lock");
    raw.execute("COMMIT").await;

    timeout(Duration::from_secs(10), async {
        while raw.acquires_waiting(&table).await > 0 {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("nothing waits once the row lock is gone");
    assert_eq!(
        l.holder("row").await.expect("holder"),
        None,
        "no owner nobody has holds the lock"
    );
    let fresh = locker(&server.url(&query)).await;
    fresh
        .try_lock("row")
        .await
        .expect("the lock is free at once")
        .release()
        .await
        .expect("release");
}

/// A plain database session beside the backend's pool.
enum RawSession {
    Postgres(sqlx::PgConnection),
    Mysql(sqlx::MySqlConnection),
}

impl RawSession {
    async fn connect(server: &dyn SqlServer) -> Self {
        use sqlx::Connection;
        let url = server.url("").replace("mariadb://", "mysql://");
        if server.label() == "postgres" {
            Self::Postgres(sqlx::PgConnection::connect(&url).await.expect("connect"))
        } else {
            Self::Mysql(sqlx::MySqlConnection::connect(&url).await.expect("connect"))
        }
    }

    async fn execute(&mut self, sql: &str) {
        let sql = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()));
        match self {
            Self::Postgres(c) => sql.execute(c).await.map(drop),
            Self::Mysql(c) => sql.execute(c).await.map(drop),
        }
        .expect("run SQL");
    }

    /// How many other sessions are running an acquire on `table` (waiting
    /// for its row lock).
    async fn acquires_waiting(&mut self, table: &str) -> i64 {
        let pattern = format!("INSERT INTO {table} %");
        match self {
            Self::Postgres(c) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pg_stat_activity
                 WHERE pid <> pg_backend_pid() AND state = 'active' AND query LIKE $1",
                )
                .bind(pattern)
                .fetch_one(c)
                .await
            }
            Self::Mysql(c) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.processlist
                 WHERE id <> CONNECTION_ID() AND info LIKE ?",
                )
                .bind(pattern)
                .fetch_one(c)
                .await
            }
        }
        .expect("count waiting sessions")
    }
}

/// Nothing listens: an error within the connect timeout, without the
/// password in it.
async fn unreachable_server(server: &dyn SqlServer) {
    let closed = conformance_tests::servers::ports::unused_port();
    let url = server.url_via(closed, "connect_timeout=1s");
    let started = Instant::now();
    let err = distlock::connect_backend(&url)
        .await
        .expect_err("nothing listens there");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.is_retryable(), "{err}");
    let shown = format!("{err} {err:?}");
    assert!(
        !shown.contains(server.password()),
        "the password leaked: {shown}"
    );
}

/// Neither the backend's `Debug`, nor its errors, show the password.
async fn password_never_shown(server: &dyn SqlServer) {
    let url = server.url(&format!("table={}", fresh_table()));
    let backend = distlock::connect_backend(&url).await.expect("connect");
    assert!(!format!("{backend:?}").contains(server.password()));
    let wrong = url.replace(server.password(), "not-the-password");
    let err = distlock::connect_backend(&wrong)
        .await
        .expect_err("wrong password");
    assert!(
        !format!("{err} {err:?}").contains("not-the-password"),
        "{err:?}"
    );
    let bad_option = format!("{url}&bogus=1");
    let err = distlock::connect_backend(&bad_option)
        .await
        .expect_err("unknown option");
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains("bogus") && !shown.contains(server.password()),
        "{shown}"
    );
}

/// A table made by somebody else with a narrower name column: names that do
/// not fit get a clear error instead of a truncation.
async fn narrow_name_column(server: &dyn SqlServer) {
    let table = fresh_table();
    let make = format!(
        "CREATE TABLE {table} (name VARCHAR(8) PRIMARY KEY, owner CHAR(32), version BIGINT NOT NULL, expires_at BIGINT NOT NULL)"
    );
    let pg_make = make.replace("expires_at BIGINT", "expires_at TIMESTAMPTZ");
    let sql = if server.label() == "postgres" {
        pg_make
    } else {
        make
    };
    RawSession::connect(server).await.execute(&sql).await;
    let l = locker(&server.url(&format!("table={table}"))).await;
    let ok = l.try_lock("short").await.expect("free");
    ok.release().await.expect("release");
    match l.try_lock("much-too-long-for-it").await {
        Err(Error::InvalidName { reason, .. }) => assert!(reason.contains("at most 8"), "{reason}"),
        other => panic!("expected InvalidName, got {other:?}"),
    }
}

/// Acquires of semaphores and read-write locks, and releases of writers
/// with a reader of the same backend waiting (a release that admits it in
/// the same transaction), cut at random points finer than tokio's timer,
/// leave no transaction open on their connection for the next operation.
/// sqlx's MySQL `BEGIN` cut before its answer leaves the session in a
/// transaction sqlx does not know of, and the pool hands it on; lock-sql
/// never cuts one (an acquire given up finishes in a task of its own, a
/// release runs in one). On a pool of one connection, a mutex taken right
/// after each cut must be committed, so another backend finds it held.
async fn cut_writes_leave_no_transaction_open(server: &dyn SqlServer) {
    use conformance_tests::cut::cut_after;
    use conformance_tests::kinds::Kinds;
    use lock_core::LockKind;
    use rand::Rng;
    let table = fresh_table();
    let cut = locker(&server.url(&format!("table={table}&pool_size=1"))).await;
    let other = locker(&server.url(&format!("table={table}"))).await;
    let ttl = Duration::from_secs(10);
    for round in 0..150 {
        // The acquire cut, or `None`: a writer's release.
        let (acquire, at) = {
            let mut rng = rand::rng();
            let acquire = match rng.random_range(0..4) {
                0 => Some(LockKind::Write),
                1 => Some(LockKind::Read),
                2 => Some(LockKind::Permit { permits: 2 }),
                _ => None,
            };
            (acquire, Duration::from_micros(rng.random_range(0..2_000)))
        };
        let name = format!("cut-{round}");
        if let Some(kind) = acquire {
            let asked = cut.lock_kind(&name, kind, opts(ttl, Wait::No));
            if let Some(Ok(guard)) = cut_after(at, asked).await {
                guard.release().await.expect("release");
            }
        } else {
            let writer = cut
                .lock_kind(&name, LockKind::Write, opts(ttl, Wait::No))
                .await
                .expect("a free name");
            let reader = tokio::spawn({
                let (cut, name) = (cut.clone(), name.clone());
                let wait = Wait::For(Duration::from_secs(20));
                async move { cut.lock_kind(&name, LockKind::Read, opts(ttl, wait)).await }
            });
            sleep(Duration::from_millis(10)).await;
            let _ = cut_after(at, writer.release()).await;
            if let Ok(guard) = reader.await.expect("the reader's task") {
                guard.release().await.expect("release");
            }
        }
        let probe = format!("probe-{round}");
        let guard = cut.try_lock(&probe).await.expect("a free name");
        let seen = other
            .try_lock(&probe)
            .await
            .expect_err("the mutex is held by the first backend");
        assert!(
            seen.is_busy(),
            "round {round}, after a cut at {at:?} (acquiring {acquire:?}, or else releasing): \
             the mutex taken after it is not committed: {seen}"
        );
        guard.release().await.expect("release");
    }
}

on_postgres_and_mariadb!(
    own: [restart_while_held],
    shared: [
        cut_writes_leave_no_transaction_open,
        acquire_behind_a_row_lock,
        unreachable_server,
        password_never_shown,
        narrow_name_column,
    ],
);
