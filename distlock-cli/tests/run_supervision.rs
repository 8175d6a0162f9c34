//! `distlock run` keeping its command inside the lease: when distlock is
//! killed or paused, when renewal fails, when the lock is lost, when the
//! command leaves processes behind, and with the signals it passes on.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use common::*;

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
    let orphan: i32 = read(&d.join("held")).trim().parse().unwrap();
    kill_all(&[orphan]);
}

/// A pause of distlock (GC, swap, SIGSTOP) longer than the TTL: the
/// watchdog sends SIGTERM, and SIGKILL when the lease runs out, so the next
/// holder never runs alongside the command — even one that does not stop on
/// SIGTERM.
#[test]
fn a_paused_distlock_has_its_command_stopped_before_the_next_holder_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script =
        "trap 'echo term >> got-term' TERM; echo $$ > held.pid; while :; do sleep 0.05; done";
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
    eventually("the lock is held", || !read(&d.join("held.pid")).is_empty());
    signal(&holder, Signal::SIGSTOP);
    // The next holder looks at the paused holder's command as it starts.
    let look = "cat /proc/$(cat held.pid)/stat > seen 2>/dev/null; true";
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
        .args(["sh", "-c", look])
        .output()
        .unwrap();
    signal(&holder, Signal::SIGCONT);
    let pid: i32 = read(&d.join("held.pid")).trim().parse().unwrap();
    let seen = read(&d.join("seen"));
    kill_all(&[pid]);
    assert!(
        taker.status.success(),
        "another run took the expired lock: {}",
        stderr(&taker)
    );
    assert!(
        seen.is_empty()
            || seen
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        "the paused holder's command still ran when the next holder started: {seen}"
    );
    assert_eq!(read(&d.join("got-term")), "term\n", "SIGTERM came first");
    exits_lost(holder);
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
    // Another writer holds the database: every renewal is refused.
    let mut blocker = Db::open(&db);
    blocker.exec("BEGIN EXCLUSIVE");
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
    blocker.exec("ROLLBACK");
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
        kill_all(&pids);
        assert!(
            gone_after < Duration::from_secs(2),
            "{script}: the command and its child outlived distlock by {gone_after:?}"
        );
    }
}

fn pids(dir: &std::path::Path, files: &[&str]) -> Vec<i32> {
    files
        .iter()
        .map(|f| read(&dir.join(f)).trim().parse().unwrap())
        .collect()
}

/// Another owner takes the lock while the command runs (here: the row is
/// rewritten behind distlock's back): the next renewal finds it gone, and
/// the command and its children are killed at once.
#[test]
fn a_lock_taken_over_kills_the_command_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("locks.db");
    let holder = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "over",
            "--ttl",
            "3s",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; wait",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the command started its child", || {
        !read(&d.join("bg.pid")).is_empty()
    });
    let pids = pids(d, &["sh.pid", "bg.pid"]);
    Db::open(&db).exec("UPDATE distlock_locks SET owner = 'someone-else', version = version + 1");
    let gone = all_gone_within(&pids, Duration::from_secs(15));
    kill_all(&pids);
    assert!(
        gone.is_some(),
        "the command and its child outlived the lock"
    );
    exits_lost(holder);
}

/// The command exits but leaves a process running in the background: it is
/// stopped before the lock is released, so nothing started under the lock
/// outlives it.
#[test]
fn processes_left_behind_are_stopped_before_the_release() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "left",
            "--ttl",
            "3s",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "sleep 300 >/dev/null 2>&1 & echo $! > bg.pid; exit 4",
        ])
        .output()
        .unwrap();
    let pids = pids(d, &["bg.pid"]);
    let still = pids.iter().any(|&p| alive(p));
    kill_all(&pids);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(!still, "the background process outlived the lock");
    assert!(
        stderr(&out).contains("left processes running"),
        "{}",
        stderr(&out)
    );
}

/// SIGINT sent to distlock alone reaches the command, which runs in a
/// process group of its own; a signal distlock was started with ignored
/// (`nohup`) stays ignored for the command.
#[test]
fn signals_reach_the_command_and_ignored_ones_stay_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = "trap 'echo int > got-int; exit 3' INT; touch ready; while :; do sleep 0.05; done";
    let holder = distlock(d)
        .args(["run", "--url", &url(d), "--name", "sig", "--"])
        .args(["sh", "-c", script])
        .spawn()
        .unwrap();
    eventually("the command runs", || d.join("ready").exists());
    signal(&holder, Signal::SIGINT);
    if ignored_here(Signal::SIGINT) {
        // Started with SIGINT ignored (a background job of a non-interactive
        // shell): distlock leaves it so, and the command never sees it.
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            !d.join("got-int").exists(),
            "an ignored SIGINT was passed on"
        );
        signal(&holder, Signal::SIGTERM);
        holder.wait_with_output().unwrap();
    } else {
        let out = holder.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(read(&d.join("got-int")), "int\n");
    }

    let out = std::process::Command::new("nohup")
        .current_dir(d)
        .args([BIN, "run", "--url", &url(d), "--name", "sig", "--"])
        .args(["sh", "-c", "grep SigIgn /proc/self/status > ignored"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mask = read(&d.join("ignored"));
    let mask = u64::from_str_radix(mask.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_eq!(
        mask & 1,
        1,
        "SIGHUP (ignored by nohup) is still ignored by the command"
    );
}

/// The command signals its whole group (`kill -USR1 0`) and ignores it
/// itself; the watchdog, in the same group, survives it and still stops the
/// command when distlock is killed.
#[test]
fn the_watchdog_survives_signals_meant_for_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = "trap '' USR1 ALRM; kill -USR1 0; kill -ALRM 0; echo $$ > sh.pid; sleep 300 & echo $! > bg.pid; wait";
    let mut victim = distlock(d)
        .args([
            "run",
            "--url",
            &url(d),
            "--name",
            "usr",
            "--ttl",
            "30s",
            "--",
        ])
        .args(["sh", "-c", script])
        .spawn()
        .unwrap();
    eventually("the command started its child", || {
        !read(&d.join("bg.pid")).is_empty()
    });
    let pids = pids(d, &["sh.pid", "bg.pid"]);
    signal(&victim, Signal::SIGKILL);
    victim.wait().unwrap();
    let gone = all_gone_within(&pids, Duration::from_secs(10));
    kill_all(&pids);
    assert!(
        gone.is_some_and(|t| t < Duration::from_secs(2)),
        "the command outlived distlock by {gone:?}"
    );
}

/// Whether this test process was started with `sig` ignored.
fn ignored_here(sig: Signal) -> bool {
    let status = read(std::path::Path::new("/proc/self/status"));
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    mask & (1 << (sig as i32 - 1)) != 0
}

/// Renewals that are slow but succeed (the database is busy for a while)
/// are no reason to stop a healthy command: neither distlock nor its
/// watchdog does.
#[test]
fn slow_renewals_that_succeed_leave_the_command_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db = d.join("locks.db");
    let url = format!("sqlite://{}?timeout=2s", db.display());
    let holder = distlock(d)
        .args(["run", "--url", &url, "--name", "slow", "--ttl", "3s", "--"])
        .args(["sh", "-c", "touch held; sleep 5; echo finished > done"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the lock is held", || d.join("held").exists());
    let mut db = Db::open(&db);
    // Busy for most of each renewal's time limit, three times over.
    for _ in 0..3 {
        db.exec("BEGIN EXCLUSIVE");
        std::thread::sleep(Duration::from_millis(1_200));
        db.exec("COMMIT");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(read(&d.join("done")), "finished\n", "{}", stderr(&out));
}

/// A command that reads the terminal from its background process group
/// would be stopped by the kernel for good while the lock is renewed; it is
/// stopped with a message instead. Run under `script`, which gives distlock
/// a terminal.
#[test]
fn a_command_reading_the_terminal_is_stopped_not_left_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inner = format!(
        "{BIN} run --url {} --name tty -- sh -c 'read line; echo read > read'; echo status=$? > status",
        url(d)
    );
    let mut script = std::process::Command::new("timeout")
        .current_dir(d)
        .args(["30", "script", "-qec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux/bsdutils");
    eventually("the run ended", || !read(&d.join("status")).is_empty());
    drop(script.stdin.take());
    let out = script.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(!d.join("read").exists(), "the command read nothing");
    assert_eq!(read(&d.join("status")), "status=143\n", "{shown}");
    assert!(shown.contains("tried to use the terminal"), "{shown}");
}

/// A connection of the test's own to the SQLite file distlock uses.
struct Db {
    runtime: tokio::runtime::Runtime,
    conn: sqlx::SqliteConnection,
}

impl Db {
    fn open(path: &std::path::Path) -> Self {
        use sqlx::Connection;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = format!("sqlite://{}", path.display());
        let conn = runtime
            .block_on(sqlx::SqliteConnection::connect(&url))
            .unwrap();
        Self { runtime, conn }
    }

    fn exec(&mut self, sql: &'static str) {
        self.runtime
            .block_on(sqlx::query(sql).execute(&mut self.conn))
            .unwrap();
    }
}

/// distlock ended with status 125, saying the lock was lost.
fn exits_lost(holder: std::process::Child) {
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("was lost"), "{}", stderr(&out));
}
