//! The multi-process case: several OS processes (the `contender` binary)
//! contend through the backend's URL and write a shared log of their
//! critical sections.

use std::path::Path;
use std::time::Duration;

use lock_core::Fencing;
use tokio::time::timeout;

use super::{assert_increasing, locker, unique};
use crate::{Target, Verdict};

/// Several OS processes contend for one name through the backend's URL; a
/// shared log proves no two critical sections overlapped.
pub async fn multi_process(t: &dyn Target, contender: &str) -> Verdict {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 6;
    let caps = locker(t).await.capabilities();
    let Some(url) = t.url().filter(|_| caps.shared_across_processes) else {
        return Verdict::NotApplicable("the backend's locks live in one process".into());
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("sections.log");
    let name = unique("procs");
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(
            tokio::process::Command::new(contender)
                .args([url.as_str(), name.as_str(), &ROUNDS.to_string()])
                .arg(&log)
                .kill_on_drop(true)
                .spawn()
                .expect("start the contender binary"),
        );
    }
    for mut child in children {
        let status = timeout(Duration::from_secs(120), child.wait())
            .await
            .expect("a contender hung")
            .expect("wait for a contender");
        assert!(status.success(), "a contender failed: {status}");
    }
    check_section_log(&log, PROCESSES * ROUNDS, caps.fencing == Fencing::Strict);
    Verdict::Passed
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
