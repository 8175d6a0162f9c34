//! A job that runs once across hosts: every host starts it on schedule,
//! one of them does the work, and the others find it running or done and
//! skip it.
//!
//! ```text
//! cargo run -p distlock --example run_once
//! ```
//!
//! The lock alone is not enough: a host that starts after the winner
//! finished would find the lock free and run the job again. So the job
//! records that it ran, in the database it works on, and a host reads that
//! record while it holds the lock. The record carries the fencing token, so
//! a holder that stalled past its lease cannot record over a newer one.

use distlock::Locker;
use sqlx::SqlitePool;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("app.db");
    let runs = run(&path, 5).await?;
    println!("5 hosts started the job at once and one more later; it ran {runs} time(s)");
    Ok(())
}

const JOB: &str = "nightly-invoices-2026-11-23";

/// Starts the job on `hosts` simulated hosts at once, then on one more that
/// comes late; returns how many times it ran. Locks and job records live in
/// the SQLite database at `path`.
pub(crate) async fn run(
    path: &std::path::Path,
    hosts: usize,
) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
    let url = format!("sqlite://{}", path.display());
    let db = SqlitePool::connect(&format!("{url}?mode=rwc")).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS jobs_done (job TEXT PRIMARY KEY, fence INTEGER NOT NULL)",
    )
    .execute(&db)
    .await?;
    let mut hosts_started = Vec::new();
    for _ in 0..hosts {
        // Each host has its own connections, as separate machines would.
        let locker = distlock::connect(&url).await?;
        hosts_started.push(tokio::spawn(run_job_once(locker, db.clone())));
    }
    let mut runs = 0;
    for host in hosts_started {
        runs += usize::from(host.await??);
    }
    let late = distlock::connect(&url).await?;
    runs += usize::from(run_job_once(late, db).await?);
    Ok(runs)
}

/// Runs the job unless another host is running it or has run it; `true`
/// if this host ran it.
async fn run_job_once(
    locker: Locker,
    db: SqlitePool,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    // No wait: a host holding the lock is running the job.
    let guard = match locker.try_lock(JOB).await {
        Ok(guard) => guard,
        Err(e) if e.is_busy() => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let done: Option<i64> = sqlx::query_scalar("SELECT fence FROM jobs_done WHERE job = ?")
        .bind(JOB)
        .fetch_optional(&db)
        .await?;
    if done.is_some() {
        guard.release().await?;
        return Ok(false);
    }
    // The job's work goes here, checking `guard.state()` between steps.
    let token = i64::try_from(guard.token().get())?;
    let recorded = sqlx::query(
        "INSERT INTO jobs_done (job, fence) VALUES (?1, ?2) \
         ON CONFLICT (job) DO UPDATE SET fence = excluded.fence WHERE jobs_done.fence < excluded.fence",
    )
    .bind(JOB)
    .bind(token)
    .execute(&db)
    .await?;
    guard.release().await?;
    Ok(recorded.rows_affected() == 1)
}
