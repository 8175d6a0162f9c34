//! `distlock torture` end to end on SQLite: worker processes, a paused
//! holder, the checker's figures as JSON, and clear failures on bad input.

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

fn torture(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("torture")
        .args(args)
        .env_remove("DISTLOCK_URL")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn a_paused_holder_is_fenced_and_nothing_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    let keep = dir.path().join("run");
    let run = torture(&[
        "--url",
        &url,
        "--duration",
        "2500ms",
        "--ttl",
        "400ms",
        "--clients",
        "3",
        "--pause",
        "--json",
        "--keep",
        keep.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["backend"], "sqlite");
    assert_eq!(report["fault"], "pause-holder");
    assert_eq!(report["strict_fencing"], true);
    let figures = &report["figures"];
    assert!(figures["grants"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(figures["faults"], 1, "one pause in 2.5 s at a 400 ms TTL");
    for zero in [
        "unsafe_overlaps",
        "stale_writes_accepted",
        "token_order_violations",
        "lost_writes",
    ] {
        assert_eq!(figures[zero], 0, "{zero}: {report}");
    }
    // The history it kept has the pause and every worker's grants.
    let history = std::fs::read_to_string(keep.join("history")).unwrap();
    assert!(history.contains(" fault pause-holder"), "{history}");
    assert!(history.contains(" healed pause-holder"), "{history}");
    assert!(history.lines().any(|l| l.contains(" final ")), "{history}");
}

#[test]
fn bad_input_and_an_unusable_service_fail_at_once() {
    let run = torture(&["--url", "nope://x"]);
    assert_eq!(run.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&run.stderr).contains("nope"));

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    let run = torture(&["--url", &url, "--ttl", "1ms"]);
    assert_eq!(
        run.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let run = torture(&["--url", &url, "--pause", "--kill"]);
    assert_eq!(run.status.code(), Some(64), "--pause and --kill conflict");

    let run = torture(&["--url", "sqlite:///nonexistent-distlock-dir/locks.db"]);
    assert_eq!(
        run.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
