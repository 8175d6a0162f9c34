//! Progress on stderr: one line per finished workload, and on a terminal a
//! line that counts up while each workload runs.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::report::WorkloadReport;
use super::workload::{DYING_TTL, Plan, Workload};

/// How far the benchmark has come.
pub(crate) struct Progress {
    done: usize,
    /// Workloads to run.
    workloads: usize,
    /// Backends measured side by side.
    targets: usize,
    /// The expected time of one workload.
    per_workload: Duration,
    started: Instant,
    terminal: bool,
}

/// A workload under way; on a terminal, its line is redrawn until it
/// finishes.
pub(crate) struct Underway {
    label: String,
    started: Instant,
    ticker: Option<JoinHandle<()>>,
}

impl Progress {
    pub(crate) fn new(plan: &Plan, targets: usize, workloads: usize) -> Self {
        let per_workload = plan.duration * u32::try_from(targets).unwrap_or(u32::MAX);
        let total = per_workload * u32::try_from(workloads).unwrap_or(u32::MAX);
        eprintln!(
            "distlock bench: {} workloads of {:.1}s per backend, each contender's share in {} \
             interleaved slices; about {:.0}s in all, and a TTL ({:.0}s or the backend's \
             shortest) per contender for the election's leaders that die",
            workloads,
            plan.duration.as_secs_f64(),
            plan.slices,
            total.as_secs_f64(),
            DYING_TTL.as_secs_f64(),
        );
        Self {
            done: 0,
            workloads,
            targets,
            per_workload,
            started: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn start(&self, workload: Workload) -> Underway {
        let label = format!(
            "[{}/{}] {:<12}",
            self.done + 1,
            self.workloads,
            workload.id()
        );
        let started = Instant::now();
        let ticker = self.terminal.then(|| {
            let (label, expected) = (label.clone(), self.per_workload.as_secs_f64());
            tokio::spawn(async move {
                loop {
                    eprint!(
                        "\r{label} {:>5.1}s / {expected:.1}s",
                        started.elapsed().as_secs_f64()
                    );
                    let _ = std::io::stderr().flush();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        });
        Underway {
            label,
            started,
            ticker,
        }
    }

    /// `measured`: each target's backend and workload.
    pub(crate) fn finish(&mut self, underway: Underway, measured: &[(&str, WorkloadReport)]) {
        if let Some(ticker) = underway.ticker {
            ticker.abort();
        }
        self.done += 1;
        let counts: Vec<String> = measured
            .iter()
            .flat_map(|(backend, m)| m.runs.iter().map(move |r| (backend, r)))
            .map(|(backend, r)| match self.targets {
                1 => format!("{} {}", r.subject, r.acquisitions),
                _ => format!("{backend} {} {}", r.subject, r.acquisitions),
            })
            .collect();
        let total = self.per_workload * u32::try_from(self.workloads).unwrap_or(u32::MAX);
        let erase = if self.terminal { "\r\x1b[K" } else { "" };
        eprintln!(
            "{erase}{} {:>5.1}s   acquisitions: {}   ({:.0}s of about {:.0}s)",
            underway.label,
            underway.started.elapsed().as_secs_f64(),
            counts.join(", "),
            self.started.elapsed().as_secs_f64(),
            total.as_secs_f64(),
        );
    }
}
