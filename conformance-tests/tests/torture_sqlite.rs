//! The fault suite on SQLite: every row of lock-sql's `Under faults:
//! SQLite` table, run and held to its claim.

use std::time::Duration;

use conformance_tests::torture::{hold_to_claim, rows};
use distlock_torture::{Calm, KillHolder, Nemesis, PauseHolder};

const README: &str = include_str!("../../lock-sql/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_its_claims_under_faults() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    let ttl = Duration::from_millis(500);
    for row in rows(README, "Under faults: SQLite") {
        let mut nemesis: Box<dyn Nemesis> = match row.fault.as_str() {
            "none" => Box::new(Calm),
            "pause-holder" => Box::<PauseHolder>::default(),
            "kill-holder" => Box::new(KillHolder),
            other => panic!("no nemesis for the README's fault {other:?}"),
        };
        hold_to_claim(WORKER, "sqlite", &url, ttl, &row, nemesis.as_mut()).await;
    }
}
