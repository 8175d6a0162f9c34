//! `distlock torture` end to end on SQLite: worker processes of the mutex,
//! a semaphore and a read-write lock, a paused or killed holder, the
//! checker's figures as JSON, exit 1 on a broken promise (the in-memory
//! backend, whose locks each worker process keeps to itself), and clear
//! failures on bad input.

use std::path::Path;
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

/// A torture run on a fresh SQLite database that kept its history in
/// `keep`, with `clients` workers and the other `args`: it succeeded,
/// granted, injected one fault and broke none of the promises that
/// `zeros` name. Returns its JSON report.
fn clean_run(dir: &Path, keep: &Path, clients: &str, args: &[&str], zeros: &[&str]) -> Value {
    let url = format!("sqlite://{}/locks.db", dir.display());
    let mut all = vec![
        "--url",
        &url,
        "--duration",
        "2500ms",
        "--ttl",
        "400ms",
        "--clients",
        clients,
        "--json",
        "--keep",
        keep.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let run = torture(&all);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{args:?}: {stderr}");
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let figures = &report["figures"];
    assert!(figures["grants"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(
        figures["faults"], 1,
        "one fault in 2.5 s at a 400 ms TTL: {report}"
    );
    for zero in zeros {
        assert_eq!(figures[zero], 0, "{args:?} {zero}: {report}");
    }
    report
}

/// The promises every lock makes.
const KEPT: [&str; 4] = [
    "unsafe_overlaps",
    "stale_writes_accepted",
    "token_order_violations",
    "lost_writes",
];

#[test]
fn a_paused_holder_is_fenced_and_nothing_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("run");
    let report = clean_run(dir.path(), &keep, "3", &["--pause"], &KEPT);
    assert_eq!(report["backend"], "sqlite");
    assert_eq!(report["fault"], "pause-holder");
    assert_eq!(report["strict_fencing"], true);
    // The history it kept has the pause and every worker's grants.
    let history = std::fs::read_to_string(keep.join("mutex/history")).unwrap();
    assert!(history.contains(" fault pause-holder"), "{history}");
    assert!(history.contains(" healed pause-holder"), "{history}");
    assert!(
        history.lines().any(|l| l.ends_with(" probe 1 1")),
        "{history}"
    );
    assert!(history.lines().any(|l| l.contains(" final ")), "{history}");
}

/// A semaphore with a paused holder, a read-write lock and an election
/// with a killed one: nothing broken, every permit back at the end.
#[test]
fn a_semaphore_and_a_read_write_lock_keep_their_promises() {
    let dir = tempfile::tempdir().unwrap();
    let mut zeros = KEPT.to_vec();
    zeros.push("leaked_permits");
    for (family, fault, lock, grant) in [
        ("--permits=2", "--pause", "semaphore/2", " permit/2"),
        ("--read-write", "--kill", "read-write", " write"),
        ("--election", "--kill", "election", " leader"),
    ] {
        let keep = dir.path().join(lock.replace('/', "-"));
        let report = clean_run(dir.path(), &keep, "4", &[family, fault], &zeros);
        assert_eq!(report["lock"], lock);
        let label = lock.split('/').next().unwrap();
        let history = std::fs::read_to_string(keep.join(label).join("history")).unwrap();
        assert!(history.lines().any(|l| l.ends_with(grant)), "{history}");
        let whole = if lock == "semaphore/2" { 2 } else { 1 };
        assert!(
            history
                .lines()
                .any(|l| l.ends_with(&format!(" probe {whole} {whole}"))),
            "the probe took the whole lock: {history}"
        );
    }
}

/// The in-memory backend keeps its locks inside each process, so the
/// workers hold side by side: every family's run reports the broken
/// promise and exits 1.
#[test]
fn a_broken_promise_exits_1_for_every_lock() {
    for family in [
        &[][..],
        &["--permits", "2"],
        &["--read-write"],
        &["--election"],
    ] {
        let mut args = vec![
            "--url",
            "memory://",
            "--duration",
            "1s",
            "--ttl",
            "300ms",
            "--clients",
            "3",
        ];
        args.extend_from_slice(family);
        let run = torture(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{family:?}: {stderr}");
        assert!(
            stderr.contains("broken promises: ") && stderr.contains(" unsafe overlaps"),
            "{family:?}: {stderr}"
        );
        assert!(
            stderr.contains("the workers will not exclude each other"),
            "{stderr}"
        );
    }
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

    let run = torture(&["--url", &url, "--permits", "2", "--read-write"]);
    assert_eq!(run.status.code(), Some(64), "one lock at a time");
    for bad in ["0", "1025", "x"] {
        let run = torture(&["--url", &url, "--permits", bad]);
        assert_eq!(run.status.code(), Some(64), "--permits {bad}");
    }

    let run = torture(&["--url", "sqlite:///nonexistent-distlock-dir/locks.db"]);
    assert_eq!(
        run.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
