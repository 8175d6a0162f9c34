use super::*;
use crate::SqlBackend;

#[tokio::test]
async fn fencing_is_strict_only_when_every_grant_is_synced() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("", Fencing::Strict),
        ("?synchronous=full", Fencing::Strict),
        ("?synchronous=normal", Fencing::BestEffort),
        (
            "?table=t2&synchronous=normal&timeout=2s",
            Fencing::BestEffort,
        ),
    ];
    for (query, fencing) in cases {
        let url = format!("sqlite://{}/locks.db{query}", dir.path().display());
        let backend = SqlBackend::connect(&url).await.unwrap();
        let capabilities = lock_core::backend::LockBackend::capabilities(&backend);
        assert_eq!(capabilities.fencing, fencing, "{url}");
    }
}

#[tokio::test]
async fn a_missing_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/missing/x.db", dir.path().display());
    let err = SqlBackend::connect(&url).await.unwrap_err().to_string();
    assert!(
        err.contains("does not exist") && err.contains("missing"),
        "{err}"
    );
    let file = dir.path().join("plain");
    std::fs::write(&file, "").unwrap();
    let err = SqlBackend::connect(&format!("sqlite://{}/x.db", file.display()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not a directory"), "{err}");
}

#[tokio::test]
async fn without_create_tables_missing_tables_are_named_and_not_made() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/x.db?table=t3", dir.path().display());
    // An empty file is an empty database.
    std::fs::write(dir.path().join("x.db"), "").unwrap();
    let err = SqlBackend::connect(&format!("{url}&create_tables=false"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, lock_core::Error::InvalidConfig { .. }),
        "{text}"
    );
    for expected in [
        "table t3,",
        "t3_holders",
        "CREATE TABLE IF NOT EXISTS t3_groups",
    ] {
        assert!(text.contains(expected), "{expected:?} not in {text}");
    }
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}/x.db", dir.path().display()))
        .await
        .unwrap();
    let options = crate::SqlConfig::default().table("t3").create_tables(false);
    let err = SqlBackend::from_pool(pool.clone(), options)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("table t3,"), "{err}");
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlite_master")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tables, 0, "create_tables=false made a table");
    SqlBackend::connect(&url)
        .await
        .expect("made with create_tables=true");
    SqlBackend::connect(&format!("{url}&create_tables=false"))
        .await
        .expect("found once made");
    let missing = format!(
        "sqlite://{}/none.db?create_tables=false",
        dir.path().display()
    );
    let err = SqlBackend::connect(&missing).await.unwrap_err();
    assert!(err.to_string().contains("no such database file"), "{err}");
    assert!(!dir.path().join("none.db").exists(), "a file was made");
}

/// A database set up by a lock-sql that kept no elections has no
/// elections table: with `create_tables=false` its locks still work and
/// elections fail naming the table; `create_tables=true` makes it.
#[tokio::test]
async fn a_database_without_the_elections_table_keeps_its_locks() {
    use lock_core::{Locker, Wait};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/old.db?table=t4", dir.path().display());
    drop(SqlBackend::connect(&url).await.unwrap());
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}/old.db", dir.path().display()))
        .await
        .unwrap();
    sqlx::query("DROP TABLE t4_elections")
        .execute(&pool)
        .await
        .unwrap();
    let old = Locker::new(
        SqlBackend::connect(&format!("{url}&create_tables=false"))
            .await
            .expect("the locks tables are there"),
    );
    let guard = old.try_lock("jobs").await.expect("the mutex works");
    guard.release().await.unwrap();
    let opts =
        lock_core::AcquireOptions::with_ttl(std::time::Duration::from_secs(10)).wait(Wait::No);
    let err = old
        .election("jobs")
        .campaign_with("a", opts)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t4_elections") && err.contains("Elections"),
        "{err}"
    );
    let made = Locker::new(SqlBackend::connect(&url).await.unwrap());
    let leading = made
        .election("jobs")
        .campaign_with("a", opts)
        .await
        .expect("the table is made");
    let leader = old.election("jobs").leader().await.unwrap().unwrap();
    assert_eq!((leader.value.as_str(), leader.term), ("a", leading.term()));
    leading.resign().await.unwrap();
}

/// An election and the mutex of one name are two locks, and each new
/// leader's term is greater, as a mutex's tokens are.
#[tokio::test]
async fn an_election_is_a_lock_of_its_own() {
    use lock_core::{Locker, Wait};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/e.db", dir.path().display());
    let locker = Locker::new(SqlBackend::connect(&url).await.unwrap());
    let mutex = locker.try_lock("n").await.unwrap();
    let opts =
        lock_core::AcquireOptions::with_ttl(std::time::Duration::from_secs(10)).wait(Wait::No);
    let election = locker.election("n");
    let first = election.campaign_with("a", opts).await.unwrap();
    assert!(
        election
            .campaign_with("b", opts)
            .await
            .unwrap_err()
            .is_busy()
    );
    first.proclaim("a2").await.unwrap();
    let holders = locker
        .backend()
        .holders(
            &lock_core::LockName::new("n").unwrap(),
            lock_core::LockKind::Leader,
        )
        .await
        .unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].kind, lock_core::LockKind::Leader);
    let term = first.term();
    first.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    let second = election.campaign_with("b", opts).await.unwrap();
    assert!(second.term() > term);
    assert!(mutex.is_held().await.unwrap(), "the mutex was not touched");
    second.resign().await.unwrap();
    mutex.release().await.unwrap();
}

/// Writes queued in the process behind one that another process's write
/// lock kept waiting for the busy timeout end as that one ends: a
/// retryable "database is locked" each, nothing sent, not a wait each in
/// turn for the busy timeout again, past the caller's limit, into a
/// timeout whose outcome nobody knows. Releases that fail so leave their
/// locks held, as they say. The pool's busy timeout (2 s) is far shorter
/// than the backend's timeout (10 s), so the queued writes cannot end by
/// their own wait's limit first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queued_behind_another_writer_fail_with_it() {
    use lock_core::{AcquireOptions, Error, Locker, Wait};
    use sqlx::Connection as _;
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("locks.db");
    let options = SqliteConnectOptions::new()
        .filename(&file)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(2));
    let pool = SqlitePool::connect_with(options).await.unwrap();
    let config = crate::SqlConfig::default().timeout(Duration::from_secs(10));
    let locker = Locker::new(SqlBackend::from_pool(pool, config).await.unwrap());
    let rw = locker.rwlock("queued");
    let hold = || AcquireOptions::with_ttl(Duration::from_secs(60)).wait(Wait::No);
    let mut guards = Vec::new();
    for _ in 0..4 {
        guards.push(rw.read_with(hold()).await.unwrap());
    }
    let url = format!("sqlite://{}", file.display());
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();

    let kept_out = |what: &str, outcome: lock_core::Result<()>| match outcome {
        Err(e @ Error::Unavailable { .. }) => e.to_string().contains("kept out"),
        other => panic!("{what}: {other:?}, not a definite \"database is locked\""),
    };
    let tries: Vec<_> = (0..4)
        .map(|_| {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read_with(hold()).await.map(drop) })
        })
        .collect();
    let mut behind = 0;
    for try_read in tries {
        behind += usize::from(kept_out("try_read", try_read.await.unwrap()));
    }
    // All but the first, unless a task so slow to start that it began
    // waiting after the first had failed waits on its own.
    assert!(behind >= 2, "{behind} of 3 failed with the first");
    let releases: Vec<_> = guards
        .into_iter()
        .map(|guard| tokio::spawn(guard.release()))
        .collect();
    for release in releases {
        kept_out("release", release.await.unwrap());
    }

    other.close().await.unwrap();
    let holders = rw.holders().await.unwrap();
    assert_eq!(
        holders.len(),
        4,
        "the releases that failed released nothing"
    );
}
