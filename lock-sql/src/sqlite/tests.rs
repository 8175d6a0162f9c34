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
