//! What a backend's README claims under each fault for each lock: the
//! `Under faults` table, read into rows of claims.

use distlock_torture::{Figures, Lock};

/// The permits of every semaphore the suite measures; with four workers
/// on it, two wait while two hold.
pub const PERMITS: u32 = 2;

/// What a README promises for one figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// None may happen.
    Zero,
    /// Some may happen; measured and published.
    Possible,
    /// Not measured for this lock (`–`): a semaphore's register figures.
    Unmeasured,
}

/// One row of a README's `## Under faults` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The fault's label, as the nemesis writes it in the history.
    pub fault: String,
    /// The lock the row is about.
    pub lock: Lock,
    /// Unsafe overlaps.
    pub overlaps: Bound,
    /// Stale writes accepted.
    pub stale_writes_accepted: Bound,
    /// Token-order violations.
    pub token_order: Bound,
    /// Lost acknowledged writes.
    pub lost_writes: Bound,
    /// Permits the probe at the end could not take.
    pub leaked_permits: Bound,
}

/// The rows of one fault: a claim for each lock the backend keeps, run
/// together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The fault's label.
    pub fault: String,
    /// Each lock's claim, in the table's order.
    pub claims: Vec<Claim>,
}

impl Row {
    /// The locks the row's run takes.
    pub fn locks(&self) -> Vec<Lock> {
        self.claims.iter().map(|c| c.lock).collect()
    }
}

const COLUMNS: [&str; 7] = [
    "fault",
    "lock",
    "unsafe overlaps",
    "stale writes accepted",
    "token-order violations",
    "lost writes",
    "leaked permits",
];

/// The lock a table's `lock` cell names (a semaphore has [`PERMITS`]).
fn lock_named(cell: &str) -> Option<Lock> {
    [
        Lock::Mutex,
        Lock::Semaphore { permits: PERMITS },
        Lock::ReadWrite,
        Lock::Election,
    ]
    .into_iter()
    .find(|l| l.label() == cell)
}

/// The rows of the table of a README's section `## {heading}` (for example
/// `Under faults`, or `Under faults: PostgreSQL` in a README that covers
/// several servers), the claims of one fault together, faults in the
/// table's order.
pub fn rows(readme: &str, heading: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for claim in claims(readme, heading) {
        match rows.iter_mut().find(|r| r.fault == claim.fault) {
            Some(row) => {
                assert!(
                    row.claims.iter().all(|c| c.lock != claim.lock),
                    "`{heading}`: two rows for {} × {}",
                    claim.fault,
                    claim.lock.label()
                );
                row.claims.push(claim);
            }
            None => rows.push(Row {
                fault: claim.fault.clone(),
                claims: vec![claim],
            }),
        }
    }
    rows
}

/// The claims in the table of a README's section `## {heading}`, one per
/// line; panics, naming the row, on anything but the documented shape.
pub fn claims(readme: &str, heading: &str) -> Vec<Claim> {
    let section = format!("\n{readme}");
    let section = section
        .split("\n## ")
        .find(|s| s.lines().next() == Some(heading))
        .unwrap_or_else(|| panic!("the README has no `## {heading}` section"));
    let rows: Vec<Vec<String>> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_owned())
                .collect()
        })
        .collect();
    assert!(
        rows.first().is_some_and(|h| h == &COLUMNS),
        "the `{heading}` table must have the columns {COLUMNS:?}, has {:?}",
        rows.first()
    );
    rows[2..]
        .iter()
        .map(|row| {
            let lock = lock_named(&row[1]).unwrap_or_else(|| {
                panic!("`{heading}` row {row:?}: lock must be mutex, semaphore or read-write")
            });
            let bound = |i: usize| {
                // A semaphore's holders leave the register alone.
                let register = matches!(COLUMNS[i], "stale writes accepted" | "lost writes");
                match (row.get(i).map(String::as_str), lock.fenced() || !register) {
                    (Some("0"), true) => Bound::Zero,
                    (Some("possible"), true) => Bound::Possible,
                    (Some("–"), false) => Bound::Unmeasured,
                    (other, measured) => panic!(
                        "`{heading}` row {row:?}: {} must be {}, is {other:?}",
                        COLUMNS[i],
                        if measured {
                            "`0` or `possible`"
                        } else {
                            "`–`"
                        }
                    ),
                }
            };
            Claim {
                fault: row[0].clone(),
                lock,
                overlaps: bound(2),
                stale_writes_accepted: bound(3),
                token_order: bound(4),
                lost_writes: bound(5),
                leaked_permits: bound(6),
            }
        })
        .collect()
}

impl Claim {
    /// Every figure the claim bounds to zero that is not zero.
    pub fn broken_by(&self, figures: &Figures) -> Vec<String> {
        [
            (self.overlaps, figures.unsafe_overlaps, COLUMNS[2]),
            (
                self.stale_writes_accepted,
                figures.stale_writes_accepted,
                COLUMNS[3],
            ),
            (self.token_order, figures.token_order_violations, COLUMNS[4]),
            (self.lost_writes, figures.lost_writes, COLUMNS[5]),
            (self.leaked_permits, figures.leaked_permits, COLUMNS[6]),
        ]
        .into_iter()
        .filter(|(bound, count, _)| *bound == Bound::Zero && *count > 0)
        .map(|(_, count, what)| format!("{what}: {count}, the README says 0"))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "| fault | lock | unsafe overlaps | stale writes accepted | token-order violations | lost writes | leaked permits |\n|---|---|---|---|---|---|---|\n";

    #[test]
    fn a_readme_table_reads_as_rows_of_claims() {
        let readme = format!(
            "# x\n\n## Under faults\n\nText.\n\n{HEADER}\
            | `pause-holder` | mutex | 0 | 0 | 0 | 0 | 0 |\n\
            | `server-kill` | mutex | possible | 0 | possible | 0 | 0 |\n\
            | `pause-holder` | semaphore | 0 | – | 0 | – | 0 |\n\
            | `server-kill` | read-write | possible | possible | 0 | 0 | possible |\n\nAfter.\n"
        );
        let rows = rows(&readme, "Under faults");
        assert_eq!(rows.len(), 2, "by fault");
        assert_eq!(rows[0].fault, "pause-holder");
        assert_eq!(
            rows[0].locks(),
            [Lock::Mutex, Lock::Semaphore { permits: PERMITS }]
        );
        let kill = &rows[1].claims;
        assert_eq!(kill[0].overlaps, Bound::Possible);
        assert_eq!(kill[0].token_order, Bound::Possible);
        assert_eq!(kill[0].lost_writes, Bound::Zero);
        assert_eq!(kill[1].lock, Lock::ReadWrite);
        assert_eq!(kill[1].leaked_permits, Bound::Possible);
        assert_eq!(rows[0].claims[1].stale_writes_accepted, Bound::Unmeasured);
        let figures = Figures {
            unsafe_overlaps: 3,
            lost_writes: 1,
            leaked_permits: 2,
            ..Figures::default()
        };
        assert_eq!(
            kill[0].broken_by(&figures).len(),
            2,
            "lost writes, leaked permits"
        );
        assert_eq!(kill[1].broken_by(&figures).len(), 1, "lost writes");
    }

    #[test]
    #[should_panic(expected = "must be `0` or `possible`")]
    fn a_vague_cell_is_refused() {
        claims(
            &format!("## Under faults\n{HEADER}| `server-kill` | mutex | rare | 0 | 0 | 0 | 0 |\n"),
            "Under faults",
        );
    }

    #[test]
    #[should_panic(expected = "stale writes accepted must be `–`")]
    fn a_semaphore_claims_nothing_of_the_register() {
        claims(
            &format!(
                "## Under faults\n{HEADER}| `server-kill` | semaphore | 0 | 0 | 0 | – | 0 |\n"
            ),
            "Under faults",
        );
    }

    #[test]
    #[should_panic(expected = "two rows for server-kill × mutex")]
    fn a_lock_has_one_row_per_fault() {
        rows(
            &format!(
                "## Under faults\n{HEADER}| `server-kill` | mutex | 0 | 0 | 0 | 0 | 0 |\n\
                | `server-kill` | mutex | 0 | 0 | 0 | 0 | 0 |\n"
            ),
            "Under faults",
        );
    }
}
