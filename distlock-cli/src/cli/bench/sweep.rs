//! `distlock bench --sweep`: how each contender's cost grows with the
//! number of clients on one name (contended, hand-off, wake-ups) and with
//! the number of names (many-names). Each point is a short run of that one
//! workload, measured like any other (interleaved slices, paired ratios).

use std::collections::BTreeMap;

use serde::Serialize;

use super::contender::Subject;
use super::report::{Better, Machine, Unit, WorkloadReport};
use super::stats::MedianInterval;
use super::target::Target;
use super::workload::Workload;

/// The client counts of the workloads on one name.
pub(crate) const CLIENTS: [usize; 5] = [1, 4, 16, 64, 256];
/// The name counts of the many-names workload.
pub(crate) const NAMES: [usize; 3] = [10, 1_000, 100_000];

/// One workload at each point of its axis.
pub(crate) struct Axis {
    pub(crate) workload: Workload,
    /// `clients` or `names`.
    pub(crate) varies: &'static str,
    pub(crate) points: &'static [usize],
}

/// The sweep's workloads; hand-off and wake-ups need a waiter, so they
/// start at 4 clients.
pub(crate) const AXES: [Axis; 4] = [
    Axis {
        workload: Workload::Contended,
        varies: "clients",
        points: &CLIENTS,
    },
    Axis {
        workload: Workload::HandOff,
        varies: "clients",
        points: &[4, 16, 64, 256],
    },
    Axis {
        workload: Workload::Wakeups,
        varies: "clients",
        points: &[4, 16, 64, 256],
    },
    Axis {
        workload: Workload::ManyNames,
        varies: "names",
        points: &NAMES,
    },
];

/// The metrics a sweep follows, by workload.
const FOLLOWED: [(Workload, &str); 6] = [
    (Workload::Contended, "acquisitions/s"),
    (Workload::Contended, "wait p99"),
    (Workload::HandOff, "hand-off p50"),
    (Workload::Wakeups, "attempts per release"),
    (Workload::Wakeups, "notices per release"),
    (Workload::ManyNames, "pairs/s"),
];

/// One backend's sweep: the data file `bench-sweep-BACKEND.json`.
#[derive(Debug, Serialize)]
pub(crate) struct Sweep {
    pub(crate) backend: &'static str,
    pub(crate) url: String,
    pub(crate) date: String,
    pub(crate) machine: Machine,
    /// Each point's wall time per backend.
    pub(crate) duration_ms: f64,
    pub(crate) subjects: Vec<Subject>,
    pub(crate) series: Vec<Series>,
}

/// One metric of one workload along its axis.
#[derive(Debug, Serialize)]
pub(crate) struct Series {
    pub(crate) workload: Workload,
    pub(crate) metric: &'static str,
    pub(crate) unit: Unit,
    pub(crate) better: Better,
    pub(crate) varies: &'static str,
    pub(crate) points: Vec<Point>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Point {
    /// Clients or names.
    pub(crate) x: usize,
    /// By contender.
    pub(crate) values: BTreeMap<String, f64>,
    /// The headline metric's paired ratios, as in a plain run.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) paired_ratio_to_floor: BTreeMap<String, MedianInterval>,
}

impl Sweep {
    /// An empty sweep of `target`.
    pub(crate) fn new(target: &Target, date: String, machine: Machine, duration_ms: f64) -> Self {
        Self {
            backend: target.backend(),
            url: target.url(),
            date,
            machine,
            duration_ms,
            subjects: target.subjects(),
            series: Vec::new(),
        }
    }

    /// Adds one point: `measured` is the workload's run with `x` clients or
    /// names.
    pub(crate) fn add(&mut self, varies: &'static str, x: usize, measured: &WorkloadReport) {
        for (workload, name) in FOLLOWED {
            if workload != measured.workload {
                continue;
            }
            let Some(metric) = measured.metrics.iter().find(|m| m.name == name) else {
                continue;
            };
            let at = match self
                .series
                .iter()
                .position(|s| s.workload == workload && s.metric == name)
            {
                Some(i) => i,
                None => {
                    self.series.push(Series {
                        workload,
                        metric: name,
                        unit: metric.unit,
                        better: metric.better,
                        varies,
                        points: Vec::new(),
                    });
                    self.series.len() - 1
                }
            };
            self.series[at].points.push(Point {
                x,
                values: metric.values.clone(),
                paired_ratio_to_floor: metric.paired_ratio_to_floor.clone(),
            });
        }
    }

    /// The sweep as a plain-text table: one line per series and contender.
    pub(crate) fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!("distlock bench --sweep: {} ({})\n", self.backend, self.url);
        for s in &self.series {
            let xs: Vec<String> = s.points.iter().map(|p| p.x.to_string()).collect();
            let _ = writeln!(
                out,
                "\n{} · {} by {} ({})",
                s.workload.id(),
                s.metric,
                s.varies,
                xs.join(", ")
            );
            for subject in &self.subjects {
                let cells: Vec<String> = s
                    .points
                    .iter()
                    .map(|p| {
                        p.values
                            .get(&subject.name)
                            .map_or_else(|| "–".to_owned(), |v| super::report::show(s.unit, *v))
                    })
                    .collect();
                let _ = writeln!(out, "  {:<18} {}", subject.name, cells.join("  "));
            }
        }
        out
    }
}
