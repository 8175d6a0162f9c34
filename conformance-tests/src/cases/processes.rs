//! The multi-process case: several OS processes (the `contender` binary)
//! contend through the backend's URL and write a shared log of their
//! critical sections.

use std::path::Path;
use std::time::Duration;

use lock_core::{Fencing, LockKind};
use tokio::time::timeout;

use super::support::{assert_increasing, locker, unique};
use crate::{Target, Verdict};

/// Several OS processes contend for one name through the backend's URL; a
/// shared log proves no two critical sections overlapped.
pub async fn multi_process(t: &dyn Target, contender: &str) -> Verdict {
    let caps = locker(t).await.capabilities();
    let Some(log) = run_contenders(t, contender, None).await else {
        return Verdict::NotApplicable("the backend's locks live in one process".into());
    };
    check_section_log(&log.1, PROCESSES * ROUNDS, caps.fencing == Fencing::Strict);
    Verdict::Passed
}

/// Several OS processes take permits of one semaphore through the
/// backend's URL; the shared log never shows more holders than permits.
pub async fn multi_process_semaphore(t: &dyn Target, contender: &str) -> Verdict {
    const PERMITS: u32 = 2;
    let caps = locker(t).await.capabilities();
    if !caps.supports(LockKind::permit(PERMITS)) {
        return Verdict::NotApplicable(format!("{} keeps no semaphores", caps.backend));
    }
    let Some((_dir, log)) = run_contenders(t, contender, Some(PERMITS)).await else {
        return Verdict::NotApplicable("the backend's locks live in one process".into());
    };
    let text = std::fs::read_to_string(&log).expect("read the section log");
    let (mut inside, mut most, mut tokens) = (0usize, 0usize, Vec::new());
    for line in text.lines() {
        if line.starts_with("enter ") {
            inside += 1;
            most = most.max(inside);
            tokens.push(line.rsplit(' ').next().expect("token").to_owned());
        } else {
            inside -= 1;
        }
    }
    assert_eq!(tokens.len(), PROCESSES * ROUNDS, "sections in:\n{text}");
    assert!(
        most <= PERMITS as usize,
        "{most} holders of {PERMITS} permits:\n{text}"
    );
    if caps.fencing != Fencing::None {
        tokens.sort();
        tokens.dedup();
        assert_eq!(
            tokens.len(),
            PROCESSES * ROUNDS,
            "a token was granted twice:\n{text}"
        );
    }
    Verdict::Passed
}

const PROCESSES: usize = 4;
const ROUNDS: usize = 6;

/// Runs the contenders to the end and returns their log (and the directory
/// that keeps it), or `None` if other processes cannot reach the locks.
async fn run_contenders(
    t: &dyn Target,
    contender: &str,
    permits: Option<u32>,
) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let caps = locker(t).await.capabilities();
    let url = t.url().filter(|_| caps.shared_across_processes)?;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("sections.log");
    let name = unique("procs");
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        let mut command = tokio::process::Command::new(contender);
        command
            .args([url.as_str(), name.as_str(), &ROUNDS.to_string()])
            .arg(&log);
        if let Some(permits) = permits {
            command.arg(permits.to_string());
        }
        children.push(
            command
                .kill_on_drop(true)
                // Kept for the failure message: which call failed, and how.
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start the contender binary"),
        );
    }
    for child in children {
        let out = timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .expect("a contender hung")
            .expect("wait for a contender");
        assert!(
            out.status.success(),
            "a contender failed: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some((dir, log))
}

/// The log is `enter PID TOKEN` / `exit PID TOKEN` lines; every enter must be
/// followed by its own exit before the next enter.
fn check_section_log(log: &Path, sections: usize, strict: bool) {
    let text = std::fs::read_to_string(log).expect("read the section log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        sections * 2,
        "expected {sections} sections in:\n{text}"
    );
    let mut tokens = Vec::new();
    for pair in lines.chunks(2) {
        let enter = pair[0]
            .strip_prefix("enter ")
            .unwrap_or_else(|| panic!("overlap at {pair:?}\n{text}"));
        let exit = pair[1]
            .strip_prefix("exit ")
            .unwrap_or_else(|| panic!("overlap at {pair:?}\n{text}"));
        assert_eq!(
            enter, exit,
            "sections of two processes interleaved:\n{text}"
        );
        let token = enter
            .rsplit(' ')
            .next()
            .and_then(|t| t.parse::<u64>().ok())
            .expect("token");
        tokens.push(token);
    }
    if strict {
        assert_increasing(&tokens);
    }
}
