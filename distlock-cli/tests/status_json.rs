//! `distlock status --json` on SQLite: one line of JSON, the same fields for
//! a held lock and a free one, and the same exit statuses as the text.

mod common;

use std::process::Output;

use nix::sys::signal::Signal;
use serde_json::Value;

use common::*;

fn status_json(dir: &std::path::Path, name: &str) -> (Option<i32>, Value) {
    let out: Output = distlock(dir)
        .args(["status", "--json", "--url", &url(dir), "--name", name])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout:?}");
    let value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout:?}"));
    (out.status.code(), value)
}

#[test]
fn a_held_lock_shows_its_owner_token_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut holder = distlock(d)
        .args(["run", "--url", &url(d), "--name", "job.7", "--ttl", "20s"])
        .args(["--", "sh", "-c", "echo $DISTLOCK_TOKEN > token; sleep 30"])
        .spawn()
        .unwrap();
    eventually("the lock is held", || {
        read(&d.join("token")).ends_with('\n')
    });
    let token: u64 = read(&d.join("token")).trim().parse().unwrap();

    let (code, json) = status_json(d, "job.7");
    signal(&holder, Signal::SIGTERM);
    holder.wait().unwrap();

    assert_eq!(code, Some(75), "held: {json}");
    assert_eq!(json["name"], "job.7");
    assert_eq!(json["held"], true);
    let owner = json["owner"].as_str().expect("owner is a string");
    assert!(
        owner.len() == 8 && owner.bytes().all(|b| b.is_ascii_hexdigit()),
        "owner is 8 hex digits: {json}"
    );
    assert_eq!(json["token"].as_u64(), Some(token), "the holder's token");
    let expires = json["expires_in_ms"]
        .as_u64()
        .expect("SQLite knows the expiry");
    assert!(
        (1..=20_000).contains(&expires),
        "within the 20s lease: {json}"
    );
    assert_eq!(
        json.as_object().unwrap().len(),
        5,
        "no other fields: {json}"
    );
}

#[test]
fn a_free_lock_has_the_same_fields_null() {
    let dir = tempfile::tempdir().unwrap();
    let (code, json) = status_json(dir.path(), "nobody");
    assert_eq!(code, Some(0), "free: {json}");
    assert_eq!(
        json,
        serde_json::json!({
            "name": "nobody",
            "held": false,
            "owner": null,
            "token": null,
            "expires_in_ms": null,
        })
    );
}

#[test]
fn the_text_stays_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = distlock(d)
        .args(["status", "--url", &url(d), "--name", "nobody"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "lock \"nobody\" is free\n"
    );
}

#[test]
fn bad_input_is_still_an_error_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let out = distlock(dir.path())
        .args(["status", "--json", "--name", "-bad"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "no JSON for an error");
}

/// `status --permits 2` lists each holder of the semaphore, in text and
/// JSON, with its token; `--read-write` lists a read-write lock's readers.
#[test]
fn a_semaphore_and_a_read_write_lock_list_their_holders() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let hold = |flags: &[&str], file: &str| {
        distlock(d)
            .args(["run", "--url", &url(d), "--name", "pool", "--ttl", "20s"])
            .args(flags)
            .args([
                "--",
                "sh",
                "-c",
                &format!("echo $DISTLOCK_TOKEN > {file}; sleep 30"),
            ])
            .spawn()
            .unwrap()
    };
    let holders = [
        hold(&["--permits", "2"], "p1"),
        hold(&["--permits", "2"], "p2"),
        hold(&["--read"], "r1"),
    ];
    for file in ["p1", "p2", "r1"] {
        eventually("held", || read(&d.join(file)).ends_with('\n'));
    }
    let token = |file: &str| read(&d.join(file)).trim().parse::<u64>().unwrap();
    let status = |flags: &[&str]| {
        distlock(d)
            .args(["status", "--url", &url(d), "--name", "pool"])
            .args(flags)
            .output()
            .unwrap()
    };
    let text = status(&["--permits", "2"]);
    let json = status(&["--permits", "2", "--json"]);
    let rw = status(&["--read-write", "--json"]);
    for mut holder in holders {
        signal(&holder, Signal::SIGTERM);
        holder.wait().unwrap();
    }

    let said = String::from_utf8(text.stdout).unwrap();
    assert_eq!(text.status.code(), Some(75), "{said}");
    assert!(
        said.contains("semaphore \"pool\" (2 permits) is held by 2"),
        "{said}"
    );
    for file in ["p1", "p2"] {
        assert!(
            said.contains(&format!("fencing token {}", token(file))),
            "{said}"
        );
    }
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["kind"], "semaphore");
    assert_eq!(json["permits"], 2);
    assert_eq!(json["held"], true);
    let mut tokens: Vec<u64> = json["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| {
            assert_eq!(h["side"], "permit", "{h}");
            h["token"].as_u64().expect("a token")
        })
        .collect();
    tokens.sort();
    let mut held = vec![token("p1"), token("p2")];
    held.sort();
    assert_eq!(tokens, held);
    let rw: serde_json::Value = serde_json::from_slice(&rw.stdout).unwrap();
    assert_eq!(rw["kind"], "read-write");
    let readers = rw["holders"].as_array().expect("holders");
    assert_eq!(readers.len(), 1, "{rw}");
    assert_eq!(readers[0]["side"], "read");
    assert_eq!(readers[0]["token"].as_u64(), Some(token("r1")));
}
