//! Faults on real PostgreSQL and MariaDB servers: a restart while a lease is
//! held, a reply lost in the middle of an acquire, an exhausted pool, an
//! acquire that lands after its caller gave up on it (held up by a stalled
//! network or a row lock), an unreachable server. Each test that stops its server gets a server of its
//! own; the others share one.

use std::time::Duration;

use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::SqlServer;
use conformance_tests::servers::mariadb::Mariadb;
use conformance_tests::servers::postgres::Postgres;
use conformance_tests::targets::fresh_table;
use lock_core::{AcquireOptions, AcquireRequest, Error, LockName, LockState, Locker, Wait};
use tokio::time::{Instant, sleep, timeout};

async fn locker(url: &str) -> Locker {
    Locker::from_arc(distlock::connect_backend(url).await.expect("connect"))
}

fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}

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
        if let Ok(Some(second)) = b.try_lock("restart").await {
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
    let next = b
        .try_lock("restart")
        .await
        .expect("try_lock")
        .expect("free after release");
    assert!(next.token() > first, "versions survive the restart");
    next.release().await.expect("release");
}

/// The connection drops after the server applied an acquire but before its
/// reply arrived. Without waiting, the caller gets an error and the grant is
/// undone at once; with a wait, the retry finds its own grant and takes it.
async fn reply_lost_mid_acquire(server: &dyn SqlServer) {
    let proxy = Proxy::start(server.port()).await;
    let query = format!(
        "table={}&pool_size=1&timeout=2s&connect_timeout=2s",
        fresh_table()
    );
    let through_proxy = locker(&server.url_via(proxy.port(), &query)).await;
    let direct = locker(&server.url(&query)).await;
    // Prepare the statements on the one pooled connection, so the next
    // request is the acquire itself.
    through_proxy
        .try_lock("warm-up")
        .await
        .expect("warm up")
        .expect("free")
        .release()
        .await
        .expect("release");

    proxy.set(Fault::DropNextReply);
    let long = Duration::from_secs(60);
    match through_proxy.lock_with("cut", opts(long, Wait::No)).await {
        Err(e) => assert!(e.is_retryable(), "a dropped connection is retryable: {e}"),
        Ok(g) => panic!("the reply was dropped, yet the acquire succeeded: {g:?}"),
    }
    assert_eq!(proxy.fault(), Fault::None, "the fault fired");
    let freed = timeout(Duration::from_secs(10), async {
        loop {
            if let Some(g) = direct.try_lock("cut").await.expect("try_lock") {
                return g;
            }
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a grant whose reply was lost is undone long before its 60s TTL");
    freed.release().await.expect("release");

    proxy.set(Fault::DropNextReply);
    let adopted = through_proxy
        .lock_with("cut", opts(long, Wait::For(Duration::from_secs(10))))
        .await
        .expect("a retry with the same owner adopts the grant whose reply was lost");
    assert!(
        direct.try_lock("cut").await.expect("try_lock").is_none(),
        "held once, by the retry"
    );
    adopted.release().await.expect("release");
}

/// A backend whose one pooled connection goes through a fault proxy, and a
/// second backend on the same table that reaches the server directly.
struct Stalled {
    proxy: Proxy,
    through_proxy: Locker,
    direct: Locker,
}

impl Stalled {
    async fn new(server: &dyn SqlServer) -> Self {
        let proxy = Proxy::start(server.port()).await;
        let query = format!(
            "table={}&pool_size=1&timeout=1s&connect_timeout=1s",
            fresh_table()
        );
        let through_proxy = locker(&server.url_via(proxy.port(), &query)).await;
        let direct = locker(&server.url(&query)).await;
        through_proxy
            .try_lock("warm-up")
            .await
            .expect("warm up")
            .expect("free")
            .release()
            .await
            .expect("release");
        // sqlx pings a connection on its way back to the pool; let that
        // finish, so that a stall catches the next statement, not the ping.
        sleep(Duration::from_millis(300)).await;
        Self {
            proxy,
            through_proxy,
            direct,
        }
    }

    /// Ends the stall and waits until the one pooled connection serves a
    /// request again, which it does only after the statement stuck in the
    /// stall has been answered: from then on, that statement has landed.
    async fn end_stall(&self) {
        self.proxy.set(Fault::None);
        timeout(Duration::from_secs(10), async {
            while self.through_proxy.holder("warm-up").await.is_err() {
                sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the connection answers again once the stall ends");
    }

    /// Waits until `name` can be taken directly, then frees it.
    async fn free_soon(&self, name: &str, why: &str) {
        let freed = timeout(Duration::from_secs(10), async {
            loop {
                if let Some(g) = self.direct.try_lock(name).await.expect("try_lock") {
                    return g;
                }
                sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect(why);
        freed.release().await.expect("release");
    }
}

/// Every pooled connection is stuck (the server stalls): callers get a
/// timeout error, not a hang, and the pool recovers afterwards, with the
/// lock free (the stalled acquire, which lands when the stall ends, is
/// undone).
async fn pool_exhausted(server: &dyn SqlServer) {
    let s = Stalled::new(server).await;
    let l = &s.through_proxy;
    s.proxy.set(Fault::Stall);
    let started = Instant::now();
    let (first, second) = tokio::join!(l.try_lock("stuck"), l.try_lock("stuck"));
    for outcome in [first, second] {
        match outcome {
            Err(e @ Error::Timeout { .. }) => assert!(e.is_retryable()),
            other => panic!("expected a timeout error, got {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "bounded by the timeouts"
    );
    s.proxy.set(Fault::None);
    timeout(Duration::from_secs(15), async {
        loop {
            if let Ok(Some(g)) = l.try_lock("stuck").await {
                g.release().await.expect("release");
                return;
            }
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the pool works again once the server answers");
}

/// The network stalls while an acquire is on its way: the caller gives up,
/// and when the stall ends the statement still reaches the server and takes
/// the row. That grant must be undone as soon as the server answers, not left
/// to an owner nobody has until its TTL.
async fn stalled_acquire_is_undone(server: &dyn SqlServer) {
    let s = Stalled::new(server).await;
    s.proxy.set(Fault::Stall);
    let long = Duration::from_secs(60);
    match s
        .through_proxy
        .lock_with("late", opts(long, Wait::No))
        .await
    {
        Err(e) => assert!(e.is_retryable(), "a stalled server is retryable: {e}"),
        Ok(g) => panic!("acquired through a stalled network: {g:?}"),
    }
    assert_eq!(
        s.direct.holder("late").await.expect("holder"),
        None,
        "nothing reached the server during the stall"
    );
    s.end_stall().await;
    s.free_soon(
        "late",
        "a grant that landed after its caller gave up is undone long before its 60s TTL",
    )
    .await;
}

/// The same when the caller drops a backend's acquire future while the
/// statement is on its way, rather than timing out.
async fn dropped_acquire_is_undone(server: &dyn SqlServer) {
    let s = Stalled::new(server).await;
    s.proxy.set(Fault::Stall);
    let name = LockName::new("dropped").expect("a valid name");
    let req = AcquireRequest::new(name, Duration::from_secs(60));
    let backend = s.through_proxy.backend();
    timeout(Duration::from_millis(300), backend.try_acquire(&req))
        .await
        .expect_err("the acquire is still on its way when it is dropped");
    s.end_stall().await;
    s.free_soon(
        "dropped",
        "a grant whose acquire was dropped is undone long before its 60s TTL",
    )
    .await;
}

/// A waiting acquire whose first attempt is stuck in a stall: the retry
/// after the stall gets the lock, and undoing the stuck attempt's late grant
/// (same owner) does not free it under the new holder.
async fn retry_after_a_stall_keeps_its_grant(server: &dyn SqlServer) {
    let s = Stalled::new(server).await;
    s.proxy.set(Fault::Stall);
    let waiting = {
        let l = s.through_proxy.clone();
        tokio::spawn(async move {
            let opts = opts(Duration::from_secs(60), Wait::For(Duration::from_secs(20)));
            l.lock_with("retried", opts).await
        })
    };
    // Past the first attempt's limit (the timeout and the client's margin).
    sleep(Duration::from_millis(3000)).await;
    s.proxy.set(Fault::None);
    let guard = timeout(Duration::from_secs(30), waiting)
        .await
        .expect("bounded by the wait")
        .expect("the task")
        .expect("the retry gets the lock once the stall ends");
    // Give a wrongly ordered undo time to land.
    sleep(Duration::from_millis(500)).await;
    let holder = s.direct.holder("retried").await.expect("holder");
    assert_eq!(
        holder.map(|h| (h.owner, h.token)),
        Some((guard.lease().owner().short(), guard.token())),
        "the lock is still the retry's"
    );
    assert_eq!(guard.state(), LockState::Held);
    guard.release().await.expect("release");
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
        .expect("make the row")
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
        .expect("try_lock")
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
    let closed = conformance_tests::servers::free_port();
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
    run_sql(server, &sql).await;
    let l = locker(&server.url(&format!("table={table}"))).await;
    let ok = l
        .try_lock("short")
        .await
        .expect("a name that fits")
        .expect("free");
    ok.release().await.expect("release");
    match l.try_lock("much-too-long-for-it").await {
        Err(Error::InvalidName { reason, .. }) => assert!(reason.contains("at most 8"), "{reason}"),
        other => panic!("expected InvalidName, got {other:?}"),
    }
}

async fn run_sql(server: &dyn SqlServer, sql: &str) {
    use sqlx::Connection;
    let url = server.url("").replace("mariadb://", "mysql://");
    if server.label() == "postgres" {
        let mut c = sqlx::PgConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut c)
            .await
            .expect("run SQL");
    } else {
        let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut c)
            .await
            .expect("run SQL");
    }
}

macro_rules! fault_tests {
    ($server:ident, $own:expr, $shared:expr) => {
        mod $server {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn restart_while_held() {
                super::restart_while_held(&$own.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn reply_lost_mid_acquire() {
                super::reply_lost_mid_acquire($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn pool_exhausted() {
                super::pool_exhausted($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stalled_acquire_is_undone() {
                super::stalled_acquire_is_undone($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn dropped_acquire_is_undone() {
                super::dropped_acquire_is_undone($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn retry_after_a_stall_keeps_its_grant() {
                super::retry_after_a_stall_keeps_its_grant($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn acquire_behind_a_row_lock() {
                super::acquire_behind_a_row_lock($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unreachable_server() {
                super::unreachable_server($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn password_never_shown() {
                super::password_never_shown($shared.await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn narrow_name_column() {
                super::narrow_name_column($shared.await).await;
            }
        }
    };
}

fault_tests!(postgres, Postgres::start(), Postgres::shared());
fault_tests!(mariadb, Mariadb::start(), Mariadb::shared());
