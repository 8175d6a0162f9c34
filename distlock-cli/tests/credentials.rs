//! `distlock run` keeps the lock store's credentials from the command it
//! runs: no DISTLOCK_URL in the command's environment, whether the URL came
//! from DISTLOCK_URL or from --url, unless --pass-url asks for it.

mod common;

use common::*;

/// What the command prints: DISTLOCK_URL, or "unset".
const SHOW_URL: [&str; 3] = ["sh", "-c", "echo \"${DISTLOCK_URL-unset}\""];

#[test]
fn the_url_from_the_environment_is_not_passed_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = distlock(dir.path())
        .env("DISTLOCK_URL", url(dir.path()))
        .args(["run", "--name", "creds", "--"])
        .args(SHOW_URL)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "unset\n");
    assert!(
        dir.path().join("locks.db").exists(),
        "distlock itself used DISTLOCK_URL"
    );
}

#[test]
fn a_url_given_with_the_flag_is_not_put_there_either() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let out = distlock(dir.path())
        .env("DISTLOCK_URL", url(&other))
        .args(["run", "--url", &url(dir.path()), "--name", "creds", "--"])
        .args(SHOW_URL)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "unset\n");
}

#[test]
fn pass_url_gives_the_command_the_url_distlock_used() {
    let dir = tempfile::tempdir().unwrap();
    let used = url(dir.path());
    for (env, flag) in [(None, Some(&used)), (Some(&used), None)] {
        let mut cmd = distlock(dir.path());
        if let Some(env) = env {
            cmd.env("DISTLOCK_URL", env);
        }
        cmd.args(["run", "--name", "creds", "--pass-url"]);
        if let Some(flag) = flag {
            cmd.args(["--url", flag]);
        }
        let out = cmd.arg("--").args(SHOW_URL).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{used}\n"));
    }
}
