//! Hand-overs inside one SQL backend: a read-write lock's release admits
//! the waiters of the same backend that it can, in its own statement
//! (PostgreSQL) or transaction (MariaDB, SQLite), and hands them their
//! grants; they hold without an admission of their own. Counted from
//! sqlx's log of every statement it runs (one subscriber for this binary,
//! since tasks run on any thread), by what marks an admission on each
//! dialect (PostgreSQL: a call of the admitting function; the others: the
//! read of the group that locks it), which each test's fresh table makes
//! its own.

mod common {
    // Its macro runs each case on MariaDB too, which hands nothing over.
    #[allow(unused_macros, unused_imports)]
    pub(crate) mod sql;
}

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::sql::{locker, opts};
use conformance_tests::kinds::Kinds;
use conformance_tests::servers::SqlServer;
use conformance_tests::servers::mariadb::Mariadb;
use conformance_tests::servers::postgres::Postgres;
use conformance_tests::targets::fresh_table;
use lock_core::{LockGuard, LockKind, Locker, Wait};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

const TTL: Duration = Duration::from_secs(30);

/// Statements sqlx ran, by their text.
#[derive(Clone, Default)]
struct Statements(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        struct Text(Option<String>);
        impl Visit for Text {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "db.statement" {
                    self.0 = Some(value.to_owned());
                }
            }
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "db.statement" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut text = Text(None);
        event.record(&mut text);
        if let Some(text) = text.0 {
            self.0.lock().unwrap().push(text);
        }
    }
}

impl Statements {
    /// The one subscriber of this binary.
    fn logged() -> &'static Statements {
        static LOGGED: OnceLock<Statements> = OnceLock::new();
        LOGGED.get_or_init(|| {
            let statements = Statements::default();
            let subscriber = Registry::default().with(statements.clone());
            tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
            statements
        })
    }

    /// How many statements so far contain `text`.
    fn containing(&self, text: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.contains(text))
            .count()
    }
}

/// The dialects.
#[derive(Clone, Copy, Debug)]
enum On {
    Postgres,
    Mariadb,
    Sqlite,
}

const ON: [On; 3] = [On::Postgres, On::Mariadb, On::Sqlite];

/// A locker on a fresh table of `on` (kept alive by the directory it
/// returns, for SQLite), and what its admissions' statements contain.
async fn fresh(on: On) -> (Locker, String, Option<tempfile::TempDir>) {
    Statements::logged();
    let table = fresh_table();
    let query = format!("table={table}");
    let (url, dir) = match on {
        On::Postgres => (Postgres::shared().await.url(&query), None),
        On::Mariadb => (Mariadb::shared().await.url(&query), None),
        On::Sqlite => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let url = format!("sqlite://{}/locks.db?{query}", dir.path().display());
            (url, Some(dir))
        }
    };
    let admission = match on {
        On::Postgres => format!("{table}_join("),
        On::Mariadb | On::Sqlite => format!("{table}_groups AS g LEFT JOIN"),
    };
    (locker(&url).await, admission, dir)
}

/// The admissions a release may log in its own transaction: none on
/// PostgreSQL (its function calls the admitting function), its one read
/// of the group elsewhere.
fn the_releases(on: On) -> usize {
    match on {
        On::Postgres => 0,
        On::Mariadb | On::Sqlite => 1,
    }
}

/// The log is read: on PostgreSQL, where a release admits without a
/// statement of its own to count, its calls of the leaving function are in
/// it (elsewhere the release's own read is counted).
fn the_releases_are_logged(on: On, admission: &str) {
    if let On::Postgres = on {
        let leave = admission.replace("_join(", "_leave(");
        assert!(
            Statements::logged().containing(&leave) > 0,
            "no statement logged"
        );
    }
}

fn ask(l: &Locker, kind: LockKind) -> JoinHandle<LockGuard> {
    let l = l.clone();
    tokio::spawn(async move {
        l.lock_kind("sides", kind, opts(TTL, Wait::For(Duration::from_secs(60))))
            .await
            .expect("granted in the end")
    })
}

async fn held(asked: JoinHandle<LockGuard>) -> LockGuard {
    timeout(Duration::from_secs(60), asked)
        .await
        .expect("held within a minute")
        .expect("task")
}

/// Time for waiters just spawned to make their first attempt and wait.
const SETTLE: Duration = Duration::from_secs(1);

/// A writer holds, and three readers of the same backend wait behind it.
/// The writer's release admits all three: no reader makes an admission of
/// its own, where each made one when the release woke it (and one before,
/// refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_admits_every_reader_behind_it() {
    for on in ON {
        a_writers_release_admits_every_reader_behind_it_on(on).await;
    }
}

async fn a_writers_release_admits_every_reader_behind_it_on(on: On) {
    let (l, admission, _dir) = fresh(on).await;
    let writer = held(ask(&l, LockKind::Write)).await;
    let before = Statements::logged().containing(&admission);
    let readers: Vec<_> = (0..3).map(|_| ask(&l, LockKind::Read)).collect();
    sleep(SETTLE).await;
    writer.release().await.expect("release");
    let mut guards = Vec::new();
    for reader in readers {
        let guard = held(reader).await;
        assert!(guard.is_held().await.expect("is_held"), "the grant is live");
        guards.push(guard);
    }
    let attempts = Statements::logged().containing(&admission) - before;
    the_releases_are_logged(on, &admission);
    assert_eq!(
        attempts,
        the_releases(on),
        "{on:?}: {attempts} admissions, the readers' own among them"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// Three readers hold, and a writer of the same backend waits behind them.
/// The last reader's release admits it: the writer makes no admission of
/// its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_readers_release_admits_the_writer_behind_them() {
    for on in ON {
        the_last_readers_release_admits_the_writer_behind_them_on(on).await;
    }
}

async fn the_last_readers_release_admits_the_writer_behind_them_on(on: On) {
    let (l, admission, _dir) = fresh(on).await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(held(ask(&l, LockKind::Read)).await);
    }
    let before = Statements::logged().containing(&admission);
    let writer = ask(&l, LockKind::Write);
    sleep(SETTLE).await;
    for reader in readers {
        reader.release().await.expect("release");
    }
    let writer = held(writer).await;
    assert!(
        writer.is_held().await.expect("is_held"),
        "the grant is live"
    );
    let attempts = Statements::logged().containing(&admission) - before;
    assert_eq!(
        attempts,
        the_releases(on),
        "{on:?}: {attempts} admissions, the writer's own among them"
    );
    writer.release().await.expect("release");
}

/// Readers of the same backend give up (their patience runs out) while a
/// writer's release may be admitting them: whatever the release granted
/// them is let go at once, so the next writer holds without waiting out a
/// TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_give_up_leave_no_grant_behind() {
    for on in ON {
        readers_that_give_up_leave_no_grant_behind_on(on).await;
    }
}

async fn readers_that_give_up_leave_no_grant_behind_on(on: On) {
    let (l, _, _dir) = fresh(on).await;
    let given_up = Arc::new(AtomicU64::new(0));
    for round in 0..20u64 {
        let writer = held(ask(&l, LockKind::Write)).await;
        let patience = Duration::from_millis(1 + round % 7);
        let quitters: Vec<_> = (0..3)
            .map(|_| {
                let (l, given_up) = (l.clone(), given_up.clone());
                tokio::spawn(async move {
                    match l
                        .lock_kind("sides", LockKind::Read, opts(TTL, Wait::For(patience)))
                        .await
                    {
                        Ok(guard) => guard.release().await.expect("release"),
                        Err(_) => {
                            given_up.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        sleep(Duration::from_millis(round % 5)).await;
        writer.release().await.expect("release");
        for quitter in quitters {
            quitter.await.expect("task");
        }
        // Nothing left holding: a writer gets in without waiting long.
        let next = l
            .lock_kind(
                "sides",
                LockKind::Write,
                opts(TTL, Wait::For(Duration::from_secs(10))),
            )
            .await
            .expect("no grant left behind");
        next.release().await.expect("release");
    }
    assert!(
        given_up.load(Ordering::Relaxed) > 0,
        "{on:?}: no reader ever gave up: the test did not test"
    );
}

/// The leaving function of a fresh PostgreSQL table, called directly:
/// `aa01` holds a read grant written by hand, and releases it naming the
/// writer `bb02`.
struct Leaving {
    table: String,
    locker: Locker,
    pool: sqlx::PgPool,
}

impl Leaving {
    async fn new() -> Self {
        let table = fresh_table();
        let server = Postgres::shared().await;
        let locker = locker(&server.url(&format!("table={table}"))).await;
        let pool = sqlx::PgPool::connect(&server.url(""))
            .await
            .expect("connect");
        Self {
            table,
            locker,
            pool,
        }
    }

    /// Writes `aa01`'s grant, with `others` (more rows of `VALUES`).
    async fn hold(&self, others: &str) {
        let table = &self.table;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table}_holders (family, name, owner, kind, token, expires_at)
             VALUES ('rw', 'sides', 'aa01', 'read', 1000, now() + INTERVAL '30 seconds'){others}"
        )))
        .execute(&self.pool)
        .await
        .expect("a holder of ours");
    }

    /// `aa01`'s release naming `bb02`, on a task of its own: what it
    /// answers.
    fn release(&self) -> JoinHandle<Vec<(Option<String>, i64)>> {
        let (pool, table) = (self.pool.clone(), self.table.clone());
        tokio::spawn(async move {
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT w_owner, w_token
                 FROM {table}_leave('rw', 'sides', 'aa01', 1000, 'bb02:write:30000')"
            )))
            .fetch_all(&pool)
            .await
            .expect("the release")
        })
    }

    /// The rows `bb02` has: its waiting mark, if anything wrote one.
    async fn marks(&self) -> i64 {
        let table = &self.table;
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table}_holders WHERE owner = 'bb02'"
        )))
        .fetch_one(&self.pool)
        .await
        .expect("count")
    }
}

/// A writer named to a release that cannot admit it (a reader of another
/// process still holds) gets no waiting mark from the release: it may have
/// given up while the release ran, and a mark its owner never abandons
/// would keep every reader out for the mark's whole length. PostgreSQL's
/// leaving function is called directly, for a holder written by hand; the
/// other dialects decide the same in `admission/leave.rs`, unit-tested
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_marks_no_writer_it_cannot_admit() {
    let leaving = Leaving::new().await;
    let other = held(ask(&leaving.locker, LockKind::Read)).await;
    leaving.hold("").await;
    let left = leaving.release().await.expect("task");
    assert_eq!(left, [(None, 0)], "deleted, and nobody admitted");
    assert_eq!(
        leaving.marks().await,
        0,
        "the release marked the writer it refused"
    );
    other.release().await.expect("release");
}

/// A writer's release whose caller stops waiting for it at once still
/// hands its grants over: the reader waiting behind it and a writer of the
/// same backend arriving right after both get in (in either order, each
/// releasing at once), well within the TTL (30 s). When the grants were
/// only handed to a caller still waiting, the reader, put back to waiting,
/// skipped its attempts behind the new writer, whose own attempts its
/// grant refused, until the grant's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_its_caller_stops_waiting_for_still_hands_over() {
    for on in ON {
        a_release_its_caller_stops_waiting_for_still_hands_over_on(on).await;
    }
}

async fn a_release_its_caller_stops_waiting_for_still_hands_over_on(on: On) {
    let (l, _, _dir) = fresh(on).await;
    let within = Duration::from_secs(10);
    let take_and_leave = |kind| {
        let asked = ask(&l, kind);
        tokio::spawn(async move { asked.await.expect("task").release().await })
    };
    for round in 0..3 {
        let writer = held(ask(&l, LockKind::Write)).await;
        let reader = take_and_leave(LockKind::Read);
        sleep(SETTLE).await;
        let _ = timeout(Duration::ZERO, writer.release()).await;
        let next = take_and_leave(LockKind::Write);
        for (who, task) in [("the reader", reader), ("the writer after it", next)] {
            timeout(within, task)
                .await
                .unwrap_or_else(|_| panic!("{on:?} round {round}: {who} never held"))
                .expect("task")
                .expect("release");
        }
    }
}

/// The same, when the holder that refuses the writer is being renewed as
/// the release runs: its row, expired as last committed, is live once the
/// renewal commits. The leaving function waits for the renewal before it
/// decides, so it still marks nobody; deciding on the row as committed, it
/// let the admission (which does wait) refuse the writer and mark it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_marks_no_writer_refused_by_a_renewal_in_flight() {
    let leaving = Leaving::new().await;
    // The group's row, made by a grant of the backend's own.
    held(ask(&leaving.locker, LockKind::Read))
        .await
        .release()
        .await
        .expect("release");
    leaving
        .hold(",\n('rw', 'sides', 'cc03', 'read', 1001, now() - INTERVAL '1 second')")
        .await;
    let mut renewal = leaving.pool.begin().await.expect("begin");
    let table = &leaving.table;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE {table}_holders SET expires_at = now() + INTERVAL '30 seconds'
         WHERE owner = 'cc03'"
    )))
    .execute(&mut *renewal)
    .await
    .expect("the renewal, not yet committed");
    let release = leaving.release();
    // Time for the release to reach the renewed row's lock.
    sleep(Duration::from_millis(500)).await;
    renewal.commit().await.expect("commit the renewal");
    let left = timeout(Duration::from_secs(30), release)
        .await
        .expect("the release ends")
        .expect("task");
    assert_eq!(left, [(None, 0)], "deleted, and nobody admitted");
    assert_eq!(
        leaving.marks().await,
        0,
        "the release marked the writer the renewed reader refused"
    );
}
