//! The figures as text: one table for a terminal or a Markdown page.

use crate::checker::Figures;
use crate::lock::Lock;

/// The column headers of [`table`].
pub const HEADERS: [&str; 11] = [
    "fault",
    "grants",
    "unsafe overlaps",
    "stale writes accepted",
    "stale writes rejected",
    "token-order violations",
    "lost writes",
    "leaked permits",
    "recovery ms",
    "lost signals",
    "errors",
];

/// A Markdown table of runs of `lock`, one row per labelled run. The
/// register's figures are `–` for a lock whose holders do not use it (a
/// semaphore's).
pub fn table<'a>(lock: Lock, rows: impl IntoIterator<Item = (&'a str, &'a Figures)>) -> String {
    let mut out = format!(
        "| {} |\n|{}\n",
        HEADERS.join(" | "),
        "---|".repeat(HEADERS.len())
    );
    let fenced = |count: u64| {
        if lock.fenced() {
            count.to_string()
        } else {
            "–".to_owned()
        }
    };
    for (label, f) in rows {
        let cells = [
            format!("`{label}`"),
            f.grants.to_string(),
            f.unsafe_overlaps.to_string(),
            fenced(f.stale_writes_accepted),
            fenced(f.stale_writes_rejected),
            f.token_order_violations.to_string(),
            fenced(f.lost_writes),
            f.leaked_permits.to_string(),
            f.recovery_ms
                .map_or("never".to_owned(), |ms| ms.to_string()),
            f.lost_signals.to_string(),
            errors(f),
        ];
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

fn errors(f: &Figures) -> String {
    if f.errors.is_empty() {
        return "–".to_owned();
    }
    f.errors
        .iter()
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Figures {
    /// What these figures of `lock` break of what every backend promises:
    /// no unsafe overlap (a lease is counted conservatively, so a paused or
    /// killed holder's lease ends before anybody else's begins), no permit
    /// that never came back (leases end) and, when the tokens are
    /// `strict`, no token out of order and none of the fence's figures
    /// either.
    pub fn broken_promises(&self, lock: Lock, strict: bool) -> Vec<String> {
        let mut broken = Vec::new();
        let mut check = |count: u64, what: &str| {
            if count > 0 {
                broken.push(format!("{count} {what}"));
            }
        };
        check(self.unsafe_overlaps, "unsafe overlaps");
        check(self.leaked_permits, "leaked permits");
        if strict {
            check(self.token_order_violations, "token-order violations");
            if lock.fenced() {
                check(self.stale_writes_accepted, "stale writes accepted");
                check(self.lost_writes, "lost writes");
            }
        }
        broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_run_with_every_figure() {
        let f = Figures {
            grants: 9,
            stale_writes_rejected: 2,
            recovery_ms: None,
            errors: [("acquire:timeout".to_owned(), 3)].into(),
            ..Figures::default()
        };
        let text = table(Lock::Mutex, [("pause-holder", &f)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[2],
            "| `pause-holder` | 9 | 0 | 0 | 2 | 0 | 0 | 0 | never | 0 | acquire:timeout 3 |"
        );
        let text = table(Lock::Semaphore { permits: 2 }, [("pause-holder", &f)]);
        assert_eq!(
            text.lines().nth(2),
            Some("| `pause-holder` | 9 | 0 | – | – | 0 | – | 0 | never | 0 | acquire:timeout 3 |"),
            "a semaphore's holders do not use the register"
        );
    }

    #[test]
    fn the_fence_is_judged_only_when_strict() {
        let f = Figures {
            lost_writes: 1,
            ..Figures::default()
        };
        assert!(f.broken_promises(Lock::Mutex, false).is_empty());
        assert_eq!(f.broken_promises(Lock::Mutex, true), ["1 lost writes"]);
        assert!(
            f.broken_promises(Lock::Semaphore { permits: 2 }, true)
                .is_empty()
        );
    }

    #[test]
    fn leaked_permits_and_overlaps_are_always_broken_promises() {
        let f = Figures {
            unsafe_overlaps: 2,
            leaked_permits: 1,
            ..Figures::default()
        };
        assert_eq!(
            f.broken_promises(Lock::ReadWrite, false),
            ["2 unsafe overlaps", "1 leaked permits"]
        );
    }
}
