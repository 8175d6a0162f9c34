//! The fault suite's harness: what each backend's README claims under each
//! fault, the nemeses that act on the harness's servers and proxies, and
//! one call that runs a backend × fault and holds it to its claim.
//!
//! A backend's README has a section `## Under faults` whose first table has
//! one row per fault it is tested under:
//!
//! ```text
//! | fault | unsafe overlaps | stale writes accepted | token-order violations | lost writes |
//! |---|---|---|---|---|
//! | `pause-holder` | 0 | 0 | 0 | 0 |
//! | `server-kill` | possible | 0 | 0 | 0 |
//! ```
//!
//! A cell is `0` (the run fails if the checker counts any) or `possible`
//! (counted and published, not asserted). The tests run exactly the rows of
//! that table, so the README, the tests and docs/RELIABILITY.md cannot
//! drift apart.

use std::path::PathBuf;
use std::time::Duration;

use distlock_torture::{Figures, Nemesis, Outcome, Run, RunPlan};
use lock_core::backend::async_trait;

use crate::proxy::{Fault, Proxy};
use crate::servers::Supervised;

pub mod recovered;

/// What a README promises for one figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// None may happen.
    Zero,
    /// Some may happen; measured and published.
    Possible,
}

/// One row of a README's `## Under faults` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The fault's label, as the nemesis writes it in the history.
    pub fault: String,
    /// Unsafe overlaps.
    pub overlaps: Bound,
    /// Stale writes accepted.
    pub stale_writes_accepted: Bound,
    /// Token-order violations.
    pub token_order: Bound,
    /// Lost acknowledged writes.
    pub lost_writes: Bound,
}

const COLUMNS: [&str; 5] = [
    "fault",
    "unsafe overlaps",
    "stale writes accepted",
    "token-order violations",
    "lost writes",
];

/// The claims in the table of a README's section `## {heading}` (for
/// example `Under faults`, or `Under faults: PostgreSQL` in a README that
/// covers several servers); panics, naming the row, on anything but the
/// documented shape.
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
        "the `Under faults` table must have the columns {COLUMNS:?}, has {:?}",
        rows.first()
    );
    rows[2..]
        .iter()
        .map(|row| {
            let bound = |i: usize| match row.get(i).map(String::as_str) {
                Some("0") => Bound::Zero,
                Some("possible") => Bound::Possible,
                other => panic!(
                    "`Under faults` row {row:?}: {} must be `0` or `possible`, is {other:?}",
                    COLUMNS[i]
                ),
            };
            Claim {
                fault: row[0].clone(),
                overlaps: bound(1),
                stale_writes_accepted: bound(2),
                token_order: bound(3),
                lost_writes: bound(4),
            }
        })
        .collect()
}

impl Claim {
    /// Every figure the claim bounds to zero that is not zero.
    pub fn broken_by(&self, figures: &Figures) -> Vec<String> {
        [
            (self.overlaps, figures.unsafe_overlaps, COLUMNS[1]),
            (
                self.stale_writes_accepted,
                figures.stale_writes_accepted,
                COLUMNS[2],
            ),
            (self.token_order, figures.token_order_violations, COLUMNS[3]),
            (self.lost_writes, figures.lost_writes, COLUMNS[4]),
        ]
        .into_iter()
        .filter(|(bound, count, _)| *bound == Bound::Zero && *count > 0)
        .map(|(_, count, what)| format!("{what}: {count}, the README says 0"))
        .collect()
    }
}

/// How long each backend × fault runs: one fault by default;
/// `DISTLOCK_TORTURE_DURATION` (e.g. `60s`) for the published figures.
pub fn duration(ttl: Duration) -> Duration {
    match std::env::var("DISTLOCK_TORTURE_DURATION") {
        Ok(text) => lock_core::url::parse_duration(&text)
            .unwrap_or_else(|e| panic!("DISTLOCK_TORTURE_DURATION={text}: {e}")),
        // quiet, fault (2 TTL), quiet, and a last round.
        Err(_) => ttl * 9 / 2,
    }
}

/// Runs `nemesis` against `url` with the worker binary `worker`, checks the
/// history against `claim`, and — when `DISTLOCK_RELIABILITY_OUT` names a
/// file — appends the figures to it as one JSON line.
pub async fn hold_to_claim(
    worker: &str,
    backend: &str,
    url: &str,
    ttl: Duration,
    claim: &Claim,
    nemesis: &mut dyn Nemesis,
) -> Outcome {
    assert_eq!(
        nemesis.label(),
        claim.fault,
        "the nemesis for a row must write the row's label"
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let plan = RunPlan::new(url, ttl, duration(ttl), vec![worker.to_owned()], dir.path());
    let outcome = distlock_torture::run(plan.clone(), nemesis)
        .await
        .unwrap_or_else(|e| panic!("{backend} × {}: the run failed: {e}", claim.fault));
    publish(backend, claim, &plan, &outcome.figures);
    let broken = claim.broken_by(&outcome.figures);
    let kept: PathBuf = std::env::temp_dir().join(format!(
        "distlock-torture-{backend}-{}.history",
        claim.fault
    ));
    if !broken.is_empty() {
        let _ = std::fs::copy(&outcome.history, &kept);
    }
    assert!(
        broken.is_empty(),
        "{backend} × {}: {}\nfigures: {:?}\nhistory kept in {}\nworkers' output:\n{}",
        claim.fault,
        broken.join("; "),
        outcome.figures,
        kept.display(),
        outcome.worker_log
    );
    assert!(
        outcome.figures.grants > 0,
        "{backend} × {}: no grant at all\nworkers' output:\n{}",
        claim.fault,
        outcome.worker_log
    );
    outcome
}

fn publish(backend: &str, claim: &Claim, plan: &RunPlan, figures: &Figures) {
    let Ok(path) = std::env::var("DISTLOCK_RELIABILITY_OUT") else {
        return;
    };
    let line = serde_json::json!({
        "backend": backend,
        "fault": claim.fault,
        "claim": {
            "unsafe_overlaps": format!("{:?}", claim.overlaps),
            "stale_writes_accepted": format!("{:?}", claim.stale_writes_accepted),
            "token_order_violations": format!("{:?}", claim.token_order),
            "lost_writes": format!("{:?}", claim.lost_writes),
        },
        "clients": plan.clients,
        "ttl_ms": plan.ttl.as_millis() as u64,
        "duration_ms": plan.duration.as_millis() as u64,
        "fault_ms": plan.fault.as_millis() as u64,
        "figures": figures,
    });
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    file.write_all(format!("{line}\n").as_bytes())
        .unwrap_or_else(|e| panic!("write {path}: {e}"));
}

/// kill -9 of a server, restarted on the same data (or, for a server that
/// keeps nothing, empty) when the fault ends.
pub struct ServerKill<'a> {
    /// The label the README's row uses.
    pub label: &'static str,
    /// The server.
    pub server: &'a Supervised,
}

#[async_trait]
impl Nemesis for ServerKill<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.kill();
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.restart();
        Ok(())
    }
}

/// SIGSTOP of a server for the fault's length, then SIGCONT.
pub struct ServerPause<'a> {
    /// The label the README's row uses.
    pub label: &'static str,
    /// The server.
    pub server: &'a Supervised,
}

#[async_trait]
impl Nemesis for ServerPause<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.pause();
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.resume();
        Ok(())
    }
}

/// A fault of the proxies between the workers and the server(s): `Stall`
/// is a partition for the fault's length, `DropNextReply` loses one reply.
pub struct NetworkFault<'a> {
    /// The label the README's row uses.
    pub label: &'static str,
    /// The proxies the workers' URL goes through.
    pub proxies: &'a [Proxy],
    /// What they do during the fault.
    pub fault: Fault,
}

#[async_trait]
impl Nemesis for NetworkFault<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        for proxy in self.proxies {
            proxy.set(self.fault);
        }
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        for proxy in self.proxies {
            proxy.set(Fault::None);
        }
        Ok(())
    }
}

/// Where a row's workers connect: to the server, or through the proxy a
/// network fault acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Straight to the server.
    Direct,
    /// Through the family's proxy.
    Proxied,
}

/// The nemesis of a fault every one-server family runs the same way —
/// `pause-holder`, `server-kill` (kill -9, restarted on its data at heal),
/// `server-pause`, `net-stall` and `net-drop-reply` — with the route its
/// workers take; `None` for any other label.
pub fn shared_nemesis<'a>(
    fault: &str,
    server: &'a Supervised,
    proxies: &'a [Proxy],
) -> Option<(Box<dyn Nemesis + 'a>, Route)> {
    let network = |label, fault| -> (Box<dyn Nemesis + 'a>, Route) {
        (
            Box::new(NetworkFault {
                label,
                proxies,
                fault,
            }),
            Route::Proxied,
        )
    };
    Some(match fault {
        "pause-holder" => (
            Box::<distlock_torture::PauseHolder>::default(),
            Route::Direct,
        ),
        "server-kill" => (
            Box::new(ServerKill {
                label: "server-kill",
                server,
            }),
            Route::Direct,
        ),
        "server-pause" => (
            Box::new(ServerPause {
                label: "server-pause",
                server,
            }),
            Route::Direct,
        ),
        "net-stall" => network("net-stall", Fault::Stall),
        "net-drop-reply" => network("net-drop-reply", Fault::DropNextReply),
        _ => return None,
    })
}

/// The nemesis of a row of a family whose server is slow to come back (a
/// consensus store restarted on its data, a member rejoining): as
/// [`shared_nemesis`], but `server-kill` and `leader-kill` (with `leader`,
/// the cluster's) strike again only once the lock was granted after the
/// last heal, waiting at most `patience`.
pub fn recovering_nemesis<'a>(
    fault: &str,
    server: &'a Supervised,
    proxies: &'a [Proxy],
    leader: Option<LeaderKill<'a>>,
    patience: Duration,
) -> Option<(Box<dyn Nemesis + 'a>, Route)> {
    use recovered::Recovered;
    Some(match (fault, leader) {
        ("server-kill", _) => (
            Box::new(Recovered {
                nemesis: ServerKill {
                    label: "server-kill",
                    server,
                },
                patience,
            }),
            Route::Direct,
        ),
        ("leader-kill", Some(nemesis)) => {
            (Box::new(Recovered { nemesis, patience }), Route::Direct)
        }
        (other, _) => return shared_nemesis(other, server, proxies),
    })
}

/// After a `net-drop-reply` row: the proxies did drop a reply, or the row
/// measured nothing.
pub fn assert_faults_applied(backend: &str, claim: &Claim, proxies: &[Proxy]) {
    if claim.fault == "net-drop-reply" {
        assert!(
            proxies.iter().any(|p| p.cuts() > 0),
            "{backend} × net-drop-reply: no reply was dropped"
        );
    }
}

/// kill -9 of a cluster's leader, found anew at each fault (right after a
/// heal the cluster may still be electing: it waits up to 10 s for one);
/// the same member restarts on its data when the fault ends.
pub struct LeaderKill<'a> {
    leader: Box<dyn Fn() -> Option<&'a Supervised> + Send + Sync + 'a>,
    killed: Option<&'a Supervised>,
}

impl<'a> LeaderKill<'a> {
    /// `leader` names the current leader's process, if there is one.
    pub fn new(leader: impl Fn() -> Option<&'a Supervised> + Send + Sync + 'a) -> Self {
        Self {
            leader: Box::new(leader),
            killed: None,
        }
    }
}

#[async_trait]
impl Nemesis for LeaderKill<'_> {
    fn label(&self) -> String {
        "leader-kill".into()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let leader = loop {
            if let Some(leader) = (self.leader)() {
                break leader;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(std::io::Error::other("the cluster has no leader"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        leader.kill();
        self.killed = Some(leader);
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        if let Some(member) = self.killed.take() {
            member.restart();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readme_table_reads_as_claims() {
        let readme = "# x\n\n## Under faults\n\nText.\n\n\
            | fault | unsafe overlaps | stale writes accepted | token-order violations | lost writes |\n\
            |---|---|---|---|---|\n\
            | `pause-holder` | 0 | 0 | 0 | 0 |\n\
            | `server-kill` | possible | 0 | possible | 0 |\n\nAfter.\n";
        let claims = claims(readme, "Under faults");
        assert_eq!(claims.len(), 2);
        assert_eq!(claims[1].fault, "server-kill");
        assert_eq!(claims[1].overlaps, Bound::Possible);
        assert_eq!(claims[1].token_order, Bound::Possible);
        assert_eq!(claims[1].lost_writes, Bound::Zero);
        let figures = Figures {
            unsafe_overlaps: 3,
            lost_writes: 1,
            ..Figures::default()
        };
        assert_eq!(claims[1].broken_by(&figures).len(), 1, "only lost writes");
    }

    #[test]
    #[should_panic(expected = "must be `0` or `possible`")]
    fn a_vague_cell_is_refused() {
        claims(
            "## Under faults\n\
            | fault | unsafe overlaps | stale writes accepted | token-order violations | lost writes |\n\
            |---|---|---|---|---|\n\
            | `server-kill` | rare | 0 | 0 | 0 |\n",
            "Under faults",
        );
    }
}
