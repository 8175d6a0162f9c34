//! The fault suite's harness: what each backend's README claims under each
//! fault for each lock it keeps, the nemeses that act on the harness's
//! servers and proxies, and one call that runs a backend × fault and holds
//! every lock to its claim.
//!
//! A backend's README has a section `## Under faults` whose first table has
//! one row per fault it is tested under and lock it keeps (the mutex, and
//! the semaphore and the read-write lock where `capabilities()` says it
//! keeps them):
//!
//! ```text
//! | fault | lock | unsafe overlaps | stale writes accepted | token-order violations | lost writes | leaked permits |
//! |---|---|---|---|---|---|---|
//! | `pause-holder` | mutex | 0 | 0 | 0 | 0 | 0 |
//! | `pause-holder` | semaphore | 0 | – | 0 | – | 0 |
//! | `server-kill` | mutex | possible | 0 | 0 | 0 | 0 |
//! ```
//!
//! A cell is `0` (the run fails if the checker counts any) or `possible`
//! (counted and published, not asserted); a semaphore's stale writes and
//! lost writes are `–`, since its holders do not use the fenced register.
//! The rows of one fault run together: one run, the workers of each lock
//! side by side under one nemesis. The tests run exactly the rows of that
//! table, so the README, the tests and docs/RELIABILITY.md cannot drift
//! apart.

use std::path::PathBuf;
use std::time::Duration;

use distlock_torture::{Figures, Lock, Nemesis, Outcome, RunPlan};

use crate::proxy::Proxy;

mod claims;
mod nemeses;
pub mod recovered;

pub use claims::{Bound, Claim, PERMITS, Row, claims, rows};
pub use nemeses::{
    LeaderKill, NetworkFault, Route, ServerKill, ServerPause, recovering_nemesis, shared_nemesis,
};

/// How long each backend × fault runs: one fault by default;
/// `DISTLOCK_TORTURE_DURATION` (e.g. `60s`) for the published figures.
pub fn duration(ttl: Duration) -> Duration {
    match std::env::var("DISTLOCK_TORTURE_DURATION") {
        Ok(text) => lock_core::url::parse_duration(&text)
            .unwrap_or_else(|e| panic!("DISTLOCK_TORTURE_DURATION={text}: {e}")),
        // quiet, fault (2 TTL), quiet, and a last round.
        Err(_) => ttl * 9 / 2,
    }
}

/// Runs `nemesis` against `url` with the worker binary `worker`, the
/// workers of every lock of `row` side by side, checks each lock's history
/// against its claim, and — when `DISTLOCK_RELIABILITY_OUT` names a file —
/// appends each lock's figures to it as one JSON line. The backend must
/// keep exactly the locks the row has claims for (the mutex, and the
/// semaphore and the read-write lock where its capabilities say so), so
/// that no README leaves out a lock its backend keeps.
pub async fn hold_to_claim(
    worker: &str,
    backend: &str,
    url: &str,
    ttl: Duration,
    row: &Row,
    nemesis: &mut dyn Nemesis,
) -> Outcome {
    hold_to_claim_for(worker, backend, url, ttl, duration(ttl), row, nemesis).await
}

/// [`hold_to_claim`] for a run of `length` instead of [`duration`]'s: a
/// fault that takes longer than a few TTLs (a failover) needs the workers
/// to go on long enough to see it through.
pub async fn hold_to_claim_for(
    worker: &str,
    backend: &str,
    url: &str,
    ttl: Duration,
    length: Duration,
    row: &Row,
    nemesis: &mut dyn Nemesis,
) -> Outcome {
    assert_eq!(
        nemesis.label(),
        row.fault,
        "the nemesis for a row must write the row's label"
    );
    assert_keeps_exactly(backend, url, row).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut plan = RunPlan::new(url, ttl, length, vec![worker.to_owned()], dir.path());
    plan.locks = row.locks();
    let outcome = distlock_torture::run(plan.clone(), nemesis)
        .await
        .unwrap_or_else(|e| panic!("{backend} × {}: the run failed: {e}", row.fault));
    let mut broken = Vec::new();
    for (claim, measured) in row.claims.iter().zip(&outcome.locks) {
        publish(backend, claim, &plan, &measured.figures);
        let what = format!("{backend} × {} × {}", row.fault, claim.lock.label());
        let kept: PathBuf = std::env::temp_dir().join(format!(
            "distlock-torture-{backend}-{}-{}.history",
            row.fault,
            claim.lock.label()
        ));
        eprintln!("{what}: {:?}", measured.figures);
        let wrong = claim.broken_by(&measured.figures);
        if !wrong.is_empty() {
            let _ = std::fs::copy(&measured.history, &kept);
            broken.push(format!(
                "{what}: {}\nfigures: {:?}\nhistory kept in {}",
                wrong.join("; "),
                measured.figures,
                kept.display()
            ));
        } else if measured.figures.grants == 0 {
            broken.push(format!("{what}: no grant at all"));
        }
    }
    assert!(
        broken.is_empty(),
        "{}\nworkers' output:\n{}",
        broken.join("\n"),
        outcome.worker_log
    );
    outcome
}

/// The locks `url`'s backend keeps are exactly those `row` has claims for.
async fn assert_keeps_exactly(backend: &str, url: &str, row: &Row) {
    let capabilities = distlock::connect(url)
        .await
        .unwrap_or_else(|e| panic!("{backend}: connect: {e}"))
        .capabilities();
    let labels = |locks: &[Lock]| locks.iter().map(|l| l.label()).collect::<Vec<_>>();
    let kept: Vec<Lock> = [
        (true, Lock::Mutex),
        (
            capabilities.semaphores,
            Lock::Semaphore { permits: PERMITS },
        ),
        (capabilities.read_write, Lock::ReadWrite),
        (capabilities.elections, Lock::Election),
    ]
    .into_iter()
    .filter_map(|(kept, lock)| kept.then_some(lock))
    .collect();
    let mut claimed = row.locks();
    claimed.sort_by_key(|l| kept.iter().position(|k| k == l));
    assert_eq!(
        labels(&claimed),
        labels(&kept),
        "{backend} × {}: the README's rows must be the locks the backend keeps",
        row.fault
    );
}

fn publish(backend: &str, claim: &Claim, plan: &RunPlan, figures: &Figures) {
    let Ok(path) = std::env::var("DISTLOCK_RELIABILITY_OUT") else {
        return;
    };
    let line = serde_json::json!({
        "backend": backend,
        "fault": claim.fault,
        "lock": claim.lock.to_arg(),
        "claim": {
            "unsafe_overlaps": format!("{:?}", claim.overlaps),
            "stale_writes_accepted": format!("{:?}", claim.stale_writes_accepted),
            "token_order_violations": format!("{:?}", claim.token_order),
            "lost_writes": format!("{:?}", claim.lost_writes),
            "leaked_permits": format!("{:?}", claim.leaked_permits),
        },
        "clients": plan.clients,
        "ttl_ms": plan.ttl.as_millis() as u64,
        "duration_ms": plan.duration.as_millis() as u64,
        "fault_ms": plan.fault.as_millis() as u64,
        "figures": figures,
    });
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    file.write_all(format!("{line}\n").as_bytes())
        .unwrap_or_else(|e| panic!("write {path}: {e}"));
}

/// After a `net-drop-reply` row: the proxies did drop a reply, or the row
/// measured nothing.
pub fn assert_faults_applied(backend: &str, row: &Row, proxies: &[Proxy]) {
    if row.fault == "net-drop-reply" {
        assert!(
            proxies.iter().any(|p| p.cuts() > 0),
            "{backend} × net-drop-reply: no reply was dropped"
        );
    }
}
