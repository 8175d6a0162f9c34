//! A scheduler that runs on one replica at a time: every replica campaigns
//! in the election `scheduler`, the leader runs the schedule's ticks, and
//! the others stand by until it steps down.
//!
//! ```text
//! cargo run -p distlock --example leader_scheduler
//! ```
//!
//! Each tick is written with the leader's term, and the store refuses a
//! write whose term is older than the last one it accepted: a leader that
//! stalled (a long pause, a partition) and woke after its successor took
//! over cannot write over the successor's ticks, even before it notices it
//! lost the lead.

use distlock::{LeaderGuard, Locker};
use sqlx::SqlitePool;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let report = run(&dir.path().join("app.db"), 3, 4).await?;
    for (replica, term) in &report.leaders {
        println!("{replica} led with term {term}");
    }
    println!(
        "{} ticks written; a deposed leader's late write was {}",
        report.ticks,
        if report.stale_write_refused {
            "refused"
        } else {
            "accepted"
        }
    );
    Ok(())
}

/// What happened: the ticks the schedule counts, each leader in the order
/// it led with its term, and whether the first leader's write made after
/// the others led was refused.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) ticks: i64,
    pub(crate) leaders: Vec<(String, u64)>,
    pub(crate) stale_write_refused: bool,
}

/// Runs `replicas` replicas on the SQLite database at `path`, each leading
/// once for `ticks` ticks before it steps down.
pub(crate) async fn run(
    path: &std::path::Path,
    replicas: usize,
    ticks: usize,
) -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let url = format!("sqlite://{}", path.display());
    let db = SqlitePool::connect(&format!("{url}?mode=rwc")).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schedule \
         (id INTEGER PRIMARY KEY CHECK (id = 1), tick INTEGER NOT NULL, term INTEGER NOT NULL)",
    )
    .execute(&db)
    .await?;
    sqlx::query("INSERT OR IGNORE INTO schedule (id, tick, term) VALUES (1, 0, 0)")
        .execute(&db)
        .await?;
    let (led_tx, mut led_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut running = Vec::new();
    for i in 0..replicas {
        // Each replica has its own connections, as separate machines would.
        let locker = distlock::connect(&url).await?;
        let (db, led) = (db.clone(), led_tx.clone());
        running.push(tokio::spawn(async move {
            replica(locker, db, format!("replica-{i}"), ticks, led).await
        }));
    }
    drop(led_tx);
    for replica in running {
        replica.await??;
    }
    let mut leaders = Vec::new();
    while let Some(led) = led_rx.recv().await {
        leaders.push(led);
    }
    leaders.sort_by_key(|(_, term)| *term);
    // The first leader, had it stalled until now, writes with its term.
    let first_term = leaders.first().map_or(0, |(_, term)| *term);
    let stale_write_refused = !tick(&db, first_term).await?;
    let ticks = sqlx::query_scalar("SELECT tick FROM schedule WHERE id = 1")
        .fetch_one(&db)
        .await?;
    Ok(Report {
        ticks,
        leaders,
        stale_write_refused,
    })
}

/// One replica: campaigns, runs `ticks` ticks while it leads, steps down.
async fn replica(
    locker: Locker,
    db: SqlitePool,
    me: String,
    ticks: usize,
    led: tokio::sync::mpsc::UnboundedSender<(String, u64)>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let leading: LeaderGuard = locker.election("scheduler").campaign(me.as_str()).await?;
    let _ = led.send((me, leading.term().get()));
    for _ in 0..ticks {
        // A lost lead stops the work; the term stops a write already on
        // its way.
        if leading.is_lost() || !tick(&db, leading.term().get()).await? {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    leading.resign().await?;
    Ok(())
}

/// Counts one tick if `term` is not older than the term of the last tick
/// written; `false` if the store refused it.
async fn tick(
    db: &SqlitePool,
    term: u64,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    let term = i64::try_from(term)?;
    let written =
        sqlx::query("UPDATE schedule SET tick = tick + 1, term = ?1 WHERE id = 1 AND term <= ?1")
            .bind(term)
            .execute(db)
            .await?;
    Ok(written.rows_affected() == 1)
}
