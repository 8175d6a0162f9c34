//! The figures as text: one table for a terminal or a Markdown page.

use crate::checker::Figures;

/// The column headers of [`table`].
pub const HEADERS: [&str; 10] = [
    "fault",
    "grants",
    "unsafe overlaps",
    "stale writes accepted",
    "stale writes rejected",
    "token-order violations",
    "lost writes",
    "recovery ms",
    "lost signals",
    "errors",
];

/// A Markdown table, one row per labelled run.
pub fn table<'a>(rows: impl IntoIterator<Item = (&'a str, &'a Figures)>) -> String {
    let mut out = format!(
        "| {} |\n|{}\n",
        HEADERS.join(" | "),
        "---|".repeat(HEADERS.len())
    );
    for (label, f) in rows {
        let cells = [
            format!("`{label}`"),
            f.grants.to_string(),
            f.unsafe_overlaps.to_string(),
            f.stale_writes_accepted.to_string(),
            f.stale_writes_rejected.to_string(),
            f.token_order_violations.to_string(),
            f.lost_writes.to_string(),
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
    /// What these figures break of what every backend promises: no unsafe
    /// overlap (a lease is counted conservatively, so a paused or killed
    /// holder's lease ends before anybody else's begins) and, when the
    /// tokens are `strict`, none of the fence's figures either.
    pub fn broken_promises(&self, strict: bool) -> Vec<String> {
        let mut broken = Vec::new();
        let mut check = |count: u64, what: &str| {
            if count > 0 {
                broken.push(format!("{count} {what}"));
            }
        };
        check(self.unsafe_overlaps, "unsafe overlaps");
        if strict {
            check(self.stale_writes_accepted, "stale writes accepted");
            check(self.token_order_violations, "token-order violations");
            check(self.lost_writes, "lost writes");
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
        let text = table([("pause-holder", &f)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[2],
            "| `pause-holder` | 9 | 0 | 0 | 2 | 0 | 0 | never | 0 | acquire:timeout 3 |"
        );
    }

    #[test]
    fn the_fence_is_judged_only_when_strict() {
        let f = Figures {
            lost_writes: 1,
            ..Figures::default()
        };
        assert!(f.broken_promises(false).is_empty());
        assert_eq!(f.broken_promises(true), ["1 lost writes"]);
    }
}
