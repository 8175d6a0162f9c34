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

#[allow(dead_code)]
#[path = "../examples/leader_scheduler.rs"]
mod leader_scheduler;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_scheduler_ticks_on_one_leader_at_a_time_with_its_term() {
    let dir = tempfile::tempdir().unwrap();
    let report = leader_scheduler::run(&dir.path().join("app.db"), 3, 4)
        .await
        .unwrap();
    assert_eq!(
        report.ticks, 12,
        "every leader's ticks, no stale one: {report:?}"
    );
    assert_eq!(report.leaders.len(), 3, "{report:?}");
    let terms: Vec<u64> = report.leaders.iter().map(|(_, t)| *t).collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    assert!(report.stale_write_refused, "{report:?}");
}
