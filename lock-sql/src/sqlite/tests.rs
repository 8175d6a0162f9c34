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
