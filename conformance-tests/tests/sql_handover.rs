//! Hand-overs inside one PostgreSQL backend: a read-write lock's release
//! admits the waiters of the same backend that it can, in its own
//! statement, and hands them their grants; they hold without an admission
//! of their own. Counted from sqlx's log of every statement it runs (one
//! subscriber for this binary, since tasks run on any thread), by the
//! admitting function's name, which each test's fresh table makes its own.

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

    /// How many statements so far called `function`.
    fn calling(&self, function: &str) -> usize {
        let call = format!("{function}(");
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.contains(&call))
            .count()
    }
}

/// A locker on a fresh table of the shared server, and the name of that
/// table's admitting function.
async fn fresh() -> (Locker, String) {
    Statements::logged();
    let table = fresh_table();
    let server = Postgres::shared().await;
    let locker = locker(&server.url(&format!("table={table}"))).await;
    (locker, format!("{table}_join"))
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
/// The writer's release admits all three in its own statement: no reader
/// calls the admitting function, where each made an attempt of its own
/// when the release woke it (and one before, refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_admits_every_reader_behind_it() {
    let (l, join) = fresh().await;
    let writer = held(ask(&l, LockKind::Write)).await;
    let before = Statements::logged().calling(&join);
    let readers: Vec<_> = (0..3).map(|_| ask(&l, LockKind::Read)).collect();
    sleep(SETTLE).await;
    writer.release().await.expect("release");
    let mut guards = Vec::new();
    for reader in readers {
        let guard = held(reader).await;
        assert!(guard.is_held().await.expect("is_held"), "the grant is live");
        guards.push(guard);
    }
    let attempts = Statements::logged().calling(&join) - before;
    // The log is read: the releases' own statements are in it.
    let leave = join.replace("_join", "_leave");
    assert!(
        Statements::logged().calling(&leave) > 0,
        "no statement logged"
    );
    assert_eq!(
        attempts, 0,
        "readers made {attempts} admissions of their own"
    );
    for guard in guards {
        guard.release().await.expect("release");
    }
}

/// Three readers hold, and a writer of the same backend waits behind them.
/// The last reader's release admits it: the writer never calls the
/// admitting function itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_readers_release_admits_the_writer_behind_them() {
    let (l, join) = fresh().await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(held(ask(&l, LockKind::Read)).await);
    }
    let before = Statements::logged().calling(&join);
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
    let attempts = Statements::logged().calling(&join) - before;
    assert_eq!(
        attempts, 0,
        "the writer made {attempts} admissions of its own"
    );
    writer.release().await.expect("release");
}

/// Readers of the same backend give up (their patience runs out) while a
/// writer's release may be admitting them: whatever the release granted
/// them is let go at once, so the next writer holds without waiting out a
/// TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_give_up_leave_no_grant_behind() {
    let (l, _) = fresh().await;
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
        "no reader ever gave up: the test did not test"
    );
}
