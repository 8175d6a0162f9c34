//! The `distlock` command as a user runs it, on SQLite files in temporary
//! directories. Waits are bounded generously; nothing here asserts speed.

mod common;

use std::process::{Command, Stdio};

use nix::sys::signal::Signal;

use common::*;

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
    let cases: [(&[&str], i32, &str); 8] = [
        (&["--name", ""], 64, "must not be empty"),
        (
            &["--name", "x", "--permits", "0"],
            64,
            "invalid permit count 0",
        ),
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
    let out = distlock(d)
        .args([
            "run",
            "--name",
            "x",
            "--permits",
            "2",
            "--write",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "a semaphore or a side, not both"
    );
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
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

/// Starts `distlock run` holding `name` as `how` says, with a command that
/// marks `mark` and then waits until `stop` exists.
fn holder(d: &std::path::Path, name: &str, how: &[&str], mark: &str) -> std::process::Child {
    distlock(d)
        .args(["run", "--url", &url(d), "--name", name])
        .args(how)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "touch {mark}; i=0; while [ ! -f stop ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"
        ))
        .spawn()
        .unwrap()
}

/// A run with `--no-wait`: its exit status.
fn no_wait(d: &std::path::Path, name: &str, how: &[&str]) -> Option<i32> {
    let out = distlock(d)
        .args(["run", "--url", &url(d), "--name", name, "--no-wait"])
        .args(how)
        .args(["--", "true"])
        .output()
        .unwrap();
    out.status.code()
}

#[test]
fn permits_let_n_commands_run_at_once_and_read_write_share_or_exclude() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let two = ["--permits", "2"];
    let mut a = holder(d, "encoders", &two, "a");
    let mut b = holder(d, "encoders", &two, "b");
    eventually("two commands hold permits", || {
        d.join("a").exists() && d.join("b").exists()
    });
    assert_eq!(no_wait(d, "encoders", &two), Some(75), "a third permit");
    assert_eq!(
        no_wait(d, "encoders", &[]),
        Some(0),
        "the lock of the same name is another lock"
    );
    let mut r = holder(d, "catalog", &["--read"], "r");
    eventually("a reader holds", || d.join("r").exists());
    assert_eq!(no_wait(d, "catalog", &["--read"]), Some(0), "readers share");
    assert_eq!(
        no_wait(d, "catalog", &["--write"]),
        Some(75),
        "a writer waits"
    );
    std::fs::write(d.join("stop"), "").unwrap();
    for child in [&mut a, &mut b, &mut r] {
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(no_wait(d, "catalog", &["--write"]), Some(0), "free again");
    assert_eq!(no_wait(d, "encoders", &two), Some(0), "free again");
}

/// Runs started at the same moment on a database file that does not exist
/// yet (cron jobs of one minute) all open it: the losers of the race to
/// set it up try again instead of failing with "database is locked".
#[test]
fn runs_started_together_on_a_new_file_all_open_it() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let runs: Vec<_> = (0..2)
            .map(|_| {
                distlock(d)
                    .args(["run", "--url", &url(d), "--name", "cron", "--permits", "2"])
                    .args(["--", "sleep", "0.2"])
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for run in runs {
            let out = run.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
        }
    }
}
