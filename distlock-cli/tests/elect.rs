//! `distlock elect` and `distlock leader` on SQLite: a standby takes over
//! from a killed leader, whose command the watchdog stops; the leader as
//! `leader --json` shows it and as `leader --watch` follows it.

mod common;

use std::fs::File;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use common::*;

/// One term as its command wrote it: the term, the shell's pid and its
/// child's.
#[derive(Debug, Clone, Copy)]
struct Started {
    term: u64,
    sh: i32,
    child: i32,
}

/// The terms candidate `who` started, in order.
fn terms(dir: &Path, who: &str) -> Vec<Started> {
    read(&dir.join(format!("started-{who}")))
        .lines()
        .filter_map(|line| {
            let mut f = line.split(' ').map(str::parse::<i64>);
            match (f.next(), f.next(), f.next()) {
                (Some(Ok(term)), Some(Ok(sh)), Some(Ok(child))) => Some(Started {
                    term: term.try_into().ok()?,
                    sh: sh.try_into().ok()?,
                    child: child.try_into().ok()?,
                }),
                _ => None,
            }
        })
        .collect()
}

/// `distlock elect --again` on election "e" with a 3 s lease; its command
/// starts a child, then appends "TERM SH_PID CHILD_PID" to started-WHO.
fn candidate(dir: &Path, who: &str) -> Child {
    let script = format!("sleep 300 & echo \"$DISTLOCK_TOKEN $$ $!\" >> started-{who}; wait");
    distlock(dir)
        .args(["elect", "--url", &url(dir), "--name", "e", "--ttl", "3s"])
        .args(["--again", "--value", who, "--", "sh", "-c", &script])
        .stderr(File::create(dir.join(format!("err-{who}"))).unwrap())
        .spawn()
        .unwrap()
}

/// The case: two standbys; SIGKILL to the leader's distlock; the
/// other's command starts within the TTL plus 2 s, under a greater term,
/// and the killed one's command and its child are stopped (by its
/// watchdog).
#[test]
fn a_standby_takes_over_from_a_killed_leader_within_the_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = candidate(d, "a");
    let b = candidate(d, "b");
    eventually("one candidate leads", || {
        !terms(d, "a").is_empty() || !terms(d, "b").is_empty()
    });
    let (mut leader, mut standby, led, stands_by) = if terms(d, "a").is_empty() {
        (b, a, "b", "a")
    } else {
        (a, b, "a", "b")
    };
    eventually("the other one stands by", || {
        read(&d.join(format!("err-{stands_by}"))).contains("waiting to lead")
    });
    let old = terms(d, led)[0];
    assert!(terms(d, stands_by).is_empty(), "one leader at a time");

    signal(&leader, Signal::SIGKILL);
    leader.wait().unwrap();
    let killed = Instant::now();
    eventually("the standby's command starts", || {
        !terms(d, stands_by).is_empty()
    });
    let took_over = killed.elapsed();
    // Its lease ran out before the standby could lead, and the watchdog
    // stops the command by then at the latest.
    let ran_beside = alive(old.sh) || alive(old.child);
    eprintln!("the standby's command started {took_over:?} after kill -9 of the leader's distlock");
    let gone = all_gone_within(&[old.sh, old.child], Duration::from_secs(10));
    let new = terms(d, stands_by)[0];

    signal(&standby, Signal::SIGTERM);
    let status = standby.wait().unwrap();
    kill_all(&[old.sh, old.child, new.sh, new.child]);

    assert!(
        took_over < Duration::from_secs(5),
        "the standby led {took_over:?} after the kill, more than the TTL (3 s) plus 2 s"
    );
    assert!(
        !ran_beside,
        "the killed leader's command still ran when the standby's started"
    );
    assert!(
        gone.is_some(),
        "the killed leader's command or its child still runs"
    );
    assert!(
        new.term > old.term,
        "the new term {} follows the old {}",
        new.term,
        old.term
    );
    assert!(!status.success(), "SIGTERM ended the standby: {status:?}");
}

fn leader_json(dir: &Path, name: &str) -> (Option<i32>, Value) {
    let out = distlock(dir)
        .args(["leader", "--json", "--url", &url(dir), "--name", name])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        stdout.lines().count(),
        1,
        "one line: {stdout:?} {}",
        stderr(&out)
    );
    let value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout:?}"));
    (out.status.code(), value)
}

/// `leader --json` shows the value, term, owner and expiry of the leader
/// (exit 75, as `status` for a held lock), and the same fields null once
/// SIGTERM made the leader resign (exit 0): at once, not when its lease
/// would have run out.
#[test]
fn leader_json_shows_the_leader_then_nobody_once_it_resigns() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut elect = distlock(d)
        .args(["elect", "--url", &url(d), "--name", "sched", "--ttl", "20s"])
        .args(["--again", "--value", "web-1:4242", "--"])
        .args([
            "sh",
            "-c",
            "echo $DISTLOCK_TOKEN $DISTLOCK_LEADER > led; sleep 300",
        ])
        .spawn()
        .unwrap();
    eventually("it leads", || read(&d.join("led")).ends_with('\n'));
    let led = read(&d.join("led"));
    let (term, value) = led.trim().split_once(' ').unwrap();
    let term: u64 = term.parse().unwrap();
    assert_eq!(value, "web-1:4242", "DISTLOCK_LEADER is the value");

    let (code, json) = leader_json(d, "sched");
    signal(&elect, Signal::SIGTERM);
    let status = elect.wait().unwrap();
    let (after, vacant) = leader_json(d, "sched");

    assert_eq!(code, Some(75), "somebody leads: {json}");
    assert_eq!(json["name"], "sched");
    assert_eq!(json["led"], true);
    assert_eq!(json["value"], "web-1:4242");
    assert_eq!(
        json["term"].as_u64(),
        Some(term),
        "the term is DISTLOCK_TOKEN"
    );
    let owner = json["owner"].as_str().expect("owner is a string");
    assert!(
        owner.len() == 8 && owner.bytes().all(|b| b.is_ascii_hexdigit()),
        "owner is 8 hex digits: {json}"
    );
    let expires = json["expires_in_ms"].as_u64().expect("SQLite knows it");
    assert!((1..=20_000).contains(&expires), "within the lease: {json}");
    assert_eq!(
        json.as_object().unwrap().len(),
        6,
        "no other fields: {json}"
    );

    assert_eq!(status.code(), Some(143), "the command's status (SIGTERM)");
    assert_eq!(after, Some(0), "nobody leads: {vacant}");
    assert_eq!(
        vacant,
        serde_json::json!({
            "name": "sched",
            "led": false,
            "value": null,
            "term": null,
            "owner": null,
            "expires_in_ms": null,
        })
    );
}

/// Without --again the exit status is the command's, and the default value
/// is HOST:PID.
#[test]
fn one_term_gives_the_commands_status_and_the_default_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = distlock(d)
        .args(["elect", "--url", &url(d), "--name", "once", "--"])
        .args(["sh", "-c", "echo $DISTLOCK_NAME $DISTLOCK_LEADER; exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let shown = String::from_utf8(out.stdout).unwrap();
    let (name, value) = shown.trim().split_once(' ').unwrap();
    assert_eq!(name, "once");
    let (host, pid) = value.rsplit_once(':').expect("HOST:PID");
    assert!(!host.is_empty() && pid.parse::<u32>().is_ok(), "{value}");
}

/// `leader --watch --json` prints the state it starts in, then a line at
/// each change, in order, and ends with status 0 on SIGTERM.
#[test]
fn leader_watch_prints_each_change_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut watch = distlock(d)
        .args([
            "leader",
            "--watch",
            "--json",
            "--url",
            &url(d),
            "--name",
            "w",
        ])
        .stdout(File::create(d.join("changes")).unwrap())
        .spawn()
        .unwrap();
    let lines = || read(&d.join("changes")).lines().count();
    eventually("the first state", || lines() == 1);
    let mut terms = Vec::new();
    for value in ["v1", "v2"] {
        let seen = lines();
        let mut elect = distlock(d)
            .args(["elect", "--url", &url(d), "--name", "w", "--value", value])
            .args([
                "--",
                "sh",
                "-c",
                "echo $DISTLOCK_TOKEN > term; exec sleep 300",
            ])
            .spawn()
            .unwrap();
        eventually("it leads", || read(&d.join("term")).ends_with('\n'));
        terms.push(read(&d.join("term")).trim().parse::<u64>().unwrap());
        std::fs::remove_file(d.join("term")).unwrap();
        eventually("the watch shows the leader", || lines() > seen);
        signal(&elect, Signal::SIGTERM);
        elect.wait().unwrap();
        eventually("the watch shows the vacancy", || lines() > seen + 1);
    }
    signal(&watch, Signal::SIGTERM);
    let status = watch.wait().unwrap();

    let changes: Vec<Value> = read(&d.join("changes"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shown: Vec<(Value, Value)> = changes
        .iter()
        .map(|c| (c["value"].clone(), c["term"].clone()))
        .collect();
    let expected: Vec<(Value, Value)> = vec![
        (Value::Null, Value::Null),
        ("v1".into(), terms[0].into()),
        (Value::Null, Value::Null),
        ("v2".into(), terms[1].into()),
        (Value::Null, Value::Null),
    ];
    assert_eq!(shown, expected, "{changes:?}");
    assert!(terms[1] > terms[0]);
    assert_eq!(status.code(), Some(0));
}

/// `leader` in words.
#[test]
fn leader_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = distlock(d)
        .args(["leader", "--url", &url(d), "--name", "nobody"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "election \"nobody\" has no leader\n"
    );
    let mut elect = distlock(d)
        .args([
            "elect",
            "--url",
            &url(d),
            "--name",
            "words",
            "--value",
            "db-2",
        ])
        .args(["--", "sh", "-c", "touch led; exec sleep 300"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    eventually("it leads", || d.join("led").exists());
    let out = distlock(d)
        .args(["leader", "--url", &url(d), "--name", "words"])
        .output()
        .unwrap();
    signal(&elect, Signal::SIGTERM);
    elect.wait().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(75), "{text}");
    assert!(
        text.starts_with("election \"words\" is led by \"db-2\" (term ")
            && text.contains("unless renewed"),
        "{text}"
    );
}
