//! The `distlock` command as a user runs it, on SQLite files in temporary
//! directories. Waits are bounded generously; nothing here asserts speed.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

fn distlock(dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir)
        .env_remove("DISTLOCK_URL")
        .env_remove("RUST_LOG");
    cmd
}

fn url(dir: &Path) -> String {
    format!("sqlite://{}/locks.db", dir.display())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Polls `cond` every 20 ms for up to 30 s.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), sig).unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn runs_a_command_on_the_default_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = distlock(dir.path())
        .args(["run", "--name", "demo", "--", "echo", "hi"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert!(
        dir.path().join("distlock.db").exists(),
        "the default URL is sqlite://distlock.db"
    );
}

#[test]
fn the_command_sees_the_name_and_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = distlock(dir.path())
        .args(["run", "--url", &url(dir.path()), "--name", "job.1", "--"])
        .args(["sh", "-c", "echo $DISTLOCK_NAME $DISTLOCK_TOKEN"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "job.1 1\n");
}

#[test]
fn a_second_run_waits_for_the_first_and_sees_a_greater_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let first = distlock(d)
        .args(["run", "--url", &url(d), "--name", "x", "--"])
        .args([
            "sh",
            "-c",
            "echo $DISTLOCK_TOKEN > first; sleep 1; touch first.done",
        ])
        .spawn()
        .unwrap();
    eventually("the first run holds the lock", || d.join("first").exists());
    let second = distlock(d)
        .args(["run", "--url", &url(d), "--name", "x", "--"])
        .args([
            "sh",
            "-c",
            "test -f first.done && echo $DISTLOCK_TOKEN > second",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let second = second.wait_with_output().unwrap();
    let mut first = first;
    assert!(first.wait().unwrap().success());
    assert!(
        second.status.success(),
        "the second ran only after the first finished: {}",
        stderr(&second)
    );
    assert!(
        stderr(&second).contains("waiting for lock \"x\""),
        "{}",
        stderr(&second)
    );
    let (a, b): (u64, u64) = (
        read(&d.join("first")).trim().parse().unwrap(),
        read(&d.join("second")).trim().parse().unwrap(),
    );
    assert!(b > a, "tokens {a} then {b}");
}

#[test]
fn no_wait_on_a_held_lock_exits_busy_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut holder = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "busy",
            "--",
            "sh",
            "-c",
            "touch held; sleep 30",
        ])
        .spawn()
        .unwrap();
    eventually("the lock is held", || d.join("held").exists());
    let out = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "busy",
            "--no-wait",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("\"busy\""), "names the lock: {err}");

    let status = distlock(d)
        .args(["status", "--url", &url(d), "--name", "busy"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(75));
    assert!(String::from_utf8_lossy(&status.stdout).contains("held by owner"));

    signal(&holder, Signal::SIGTERM);
    holder.wait().unwrap();
    let status = distlock(d)
        .args(["status", "--url", &url(d), "--name", "busy"])
        .output()
        .unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "SIGTERM was forwarded and the lock released"
    );
}

#[test]
fn a_killed_holder_frees_its_lock_within_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut victim = distlock(d)
        .args(["run", "--url", &url(d), "--name", "k", "--ttl", "1s", "--"])
        .args(["sh", "-c", "echo $$ > held; exec sleep 30"])
        .spawn()
        .unwrap();
    eventually("the lock is held", || !read(&d.join("held")).is_empty());
    signal(&victim, Signal::SIGKILL);
    victim.wait().unwrap();
    let started = Instant::now();
    let out = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "k",
            "--wait",
            "20s",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(20));
    // The killed run's command was orphaned, as on a crash; stop it.
    let orphan: i32 = read(&d.join("held")).trim().parse().unwrap();
    let _ = kill(Pid::from_raw(orphan), Signal::SIGKILL);
}

/// A pause of distlock (GC, swap, SIGSTOP) longer than the TTL: the
/// watchdog stops the command before the lease runs out, so the next holder
/// never runs alongside it.
#[test]
fn a_paused_distlock_has_its_command_stopped_before_the_next_holder_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script =
        "trap 'echo term > got-term; exit 0' TERM; touch held; while :; do sleep 0.05; done";
    let holder = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "pause",
            "--ttl",
            "1s",
            "--grace",
            "500ms",
            "--",
        ])
        .args(["sh", "-c", script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the lock is held", || d.join("held").exists());
    signal(&holder, Signal::SIGSTOP);
    let taker = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "pause",
            "--wait",
            "20s",
            "--",
        ])
        .args(["sh", "-c", "test -f got-term && touch taker-ran"])
        .output()
        .unwrap();
    signal(&holder, Signal::SIGCONT);
    assert!(
        taker.status.success(),
        "another run took the expired lock: {}",
        stderr(&taker)
    );
    assert!(
        d.join("taker-ran").exists(),
        "the paused holder's command was stopped before the next holder's ran"
    );
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("was lost"), "{}", stderr(&out));
}

/// Renewal fails (the database is locked by somebody else) while the command
/// runs: the command gets SIGTERM while the lease still has --grace left,
/// not when it has run out, and ends before the next holder starts.
#[test]
fn failing_renewal_stops_the_command_while_the_lease_is_still_valid() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("locks.db");
    let url = format!("sqlite://{}?timeout=100ms", db.display());
    let script =
        "trap 'date +%s%N > got-term; exit 0' TERM; touch held; while :; do sleep 0.05; done";
    let holder = distlock(d)
        .args([
            "run", "--url", &url, "--name", "r", "--ttl", "3s", "--grace", "1500ms", "--",
        ])
        .args(["sh", "-c", script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the lock is held", || d.join("held").exists());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Another writer holds the database: every renewal is refused.
    let mut blocker = rt.block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut c)
            .await
            .unwrap();
        c
    });
    let blocked_at = unix_nanos();
    let out = holder.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("kept failing") && !err.contains("ran out"),
        "stopped while the lease was valid, not after: {err}"
    );
    let termed: u128 = read(&d.join("got-term")).trim().parse().unwrap();
    assert!(
        termed < blocked_at + 3_000_000_000,
        "SIGTERM came before the lease (at most 3s from the last renewal) ran out"
    );
    rt.block_on(sqlx::query("ROLLBACK").execute(&mut blocker))
        .unwrap();
    drop(blocker);
    let next = distlock(d)
        .args(["run", "--url", &url, "--name", "r", "--wait", "20s", "--"])
        .args(["sh", "-c", "date +%s%N > next"])
        .output()
        .unwrap();
    assert!(next.status.success(), "{}", stderr(&next));
    let next_at: u128 = read(&d.join("next")).trim().parse().unwrap();
    assert!(
        termed < next_at,
        "the command ended before the next holder ran"
    );
}

/// distlock killed with SIGKILL (or by the OOM killer): its watchdog stops
/// the command and every process the command started, SIGKILL after --grace
/// for those that ignore SIGTERM.
#[test]
fn killing_distlock_stops_the_command_and_its_children() {
    for (script, grace) in [
        (
            "echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; wait",
            "10s",
        ),
        (
            "trap '' TERM; echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; wait",
            "1s",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut victim = distlock(d)
            .args([
                "run",
                "--url",
                &url(d),
                "--name",
                "k",
                "--ttl",
                "30s",
                "--grace",
                grace,
            ])
            .args(["--", "sh", "-c", script])
            .spawn()
            .unwrap();
        eventually("the command started its child", || {
            !read(&d.join("bg.pid")).is_empty()
        });
        let pids: Vec<i32> = ["sh.pid", "bg.pid"]
            .iter()
            .map(|f| read(&d.join(f)).trim().parse().unwrap())
            .collect();
        signal(&victim, Signal::SIGKILL);
        victim.wait().unwrap();
        let killed = Instant::now();
        while pids.iter().any(|&pid| alive(pid)) && killed.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let gone_after = killed.elapsed();
        for pid in &pids {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        assert!(
            gone_after < Duration::from_secs(2),
            "{script}: the command and its child outlived distlock by {gone_after:?}"
        );
    }
}

/// Whether `pid` is a process that still runs (not gone, not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !state.is_some_and(|s| s.starts_with('Z'))
    })
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn the_command_status_is_passed_through() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let code = |script: &str| {
        distlock(d)
            .args([
                "run",
                "--url",
                &url(d),
                "--name",
                "s",
                "--",
                "sh",
                "-c",
                script,
            ])
            .status()
            .unwrap()
            .code()
    };
    assert_eq!(code("exit 7"), Some(7));
    assert_eq!(code("kill -9 $$"), Some(128 + 9));
    let missing = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "s",
            "--",
            "no-such-cmd-xyz",
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
}

#[test]
fn bad_input_gets_one_clear_line_and_a_usage_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let long = "x".repeat(129);
    let missing_dir = format!("sqlite://{}/no/such/dir/l.db", d.display());
    let file = d.join("a-file");
    std::fs::write(&file, "").unwrap();
    let under_file = format!("sqlite://{}/l.db", file.display());
    let cases: [(&[&str], i32, &str); 7] = [
        (&["--name", ""], 64, "must not be empty"),
        (&["--name", &long], 64, "at most 128 bytes"),
        (&["--name", "x", "--ttl", "0s"], 64, "invalid TTL"),
        (
            &["--name", "x", "--ttl", "5s", "--grace", "5s"],
            64,
            "--grace (5.0s) must be shorter than --ttl (5.0s)",
        ),
        (
            &["--name", "x", "--url", "gopher://h"],
            64,
            "unknown URL scheme \"gopher\"",
        ),
        (
            &["--name", "x", "--url", &missing_dir],
            69,
            "does not exist",
        ),
        (
            &["--name", "x", "--url", &under_file],
            69,
            "is not a directory",
        ),
    ];
    for (args, status, message) in cases {
        let out = distlock(d)
            .arg("run")
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.contains(message) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    let out = distlock(d)
        .args(["run", "--name", "x", "--ttl", "soon", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = distlock(d).args(["run", "--name", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "a command is required");
}

#[test]
fn help_lists_the_exit_statuses() {
    let out = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--no-wait", "DISTLOCK_TOKEN", "75", "124", "125"] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[test]
fn verbose_shows_acquire_and_release_spans() {
    let dir = tempfile::tempdir().unwrap();
    let out = distlock(dir.path())
        .args([
            "-v",
            "run",
            "--url",
            &url(dir.path()),
            "--name",
            "v",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("acquire") && err.contains("release"), "{err}");
}
