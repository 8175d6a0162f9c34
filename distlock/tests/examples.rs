//! The examples in `examples/` that need no server, run as they are (the
//! ones that write to PostgreSQL and Redis run in conformance-tests, which
//! starts those servers).

#[allow(dead_code)]
#[path = "../examples/swap_backends.rs"]
mod swap_backends;

#[allow(dead_code)]
#[path = "../examples/run_once.rs"]
mod run_once;

#[allow(dead_code)]
#[path = "../examples/lost_lock.rs"]
mod lost_lock;

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}/locks.db", dir.path().display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swap_backends_works_under_the_lock_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let report = swap_backends::run(&sqlite_url(&dir)).await.unwrap();
    assert!(report.starts_with("sqlite: built the report"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_runs_the_job_once_among_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let runs = run_once::run(&dir.path().join("app.db"), 5).await.unwrap();
    assert_eq!(runs, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lock_stops_the_work_when_the_lock_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let steps = lost_lock::run(&sqlite_url(&dir)).await.unwrap();
    assert_eq!(steps, 3, "no step after the lock was found lost");
}
