//! The results of one run: the data file's shape, the rows compared with the
//! floor, and the table printed on stdout.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::contender::{Role, Subject};
use super::stats::MedianInterval;
use super::workload::{Run, Workload};

/// Everything one `distlock bench` run measured; written as the JSON data
/// file and drawn as the chart.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// The backend, as its capabilities name it.
    pub(crate) backend: &'static str,
    /// The URL, with any password removed.
    pub(crate) url: String,
    /// The day of the run (UTC), `YYYY-MM-DD`.
    pub(crate) date: String,
    pub(crate) machine: Machine,
    pub(crate) settings: Settings,
    /// Library first, then the floor, then any peers.
    pub(crate) subjects: Vec<Subject>,
    pub(crate) workloads: Vec<WorkloadReport>,
    /// Each contender's hand-off p50 over the floor's single command (its
    /// uncontended acquire p50): how many round trips a hand-off costs.
    pub(crate) hand_off_in_floor_commands: BTreeMap<String, f64>,
}

/// Where the numbers come from; they only compare within one machine.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Machine {
    pub(crate) cores: usize,
    pub(crate) os: &'static str,
    pub(crate) arch: &'static str,
}

/// The command-line settings of the run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Settings {
    pub(crate) clients: usize,
    pub(crate) names: usize,
    /// The wall time of each workload.
    pub(crate) duration_ms: f64,
    /// Each contender's share of it.
    pub(crate) share_ms: f64,
    /// How many interleaved slices each share was run in.
    pub(crate) slices: u32,
    pub(crate) hold_ms: f64,
    pub(crate) ttl_ms: f64,
}

/// One workload: what it does, each contender's raw run, and the metrics
/// compared with the floor.
#[derive(Debug, Serialize)]
pub(crate) struct WorkloadReport {
    pub(crate) workload: Workload,
    pub(crate) describe: String,
    /// What the latency distributions in `runs` measure.
    pub(crate) latency: &'static str,
    pub(crate) runs: Vec<Run>,
    pub(crate) metrics: Vec<Metric>,
}

/// How a metric's values read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Unit {
    /// Per second.
    PerSecond,
    /// Microseconds.
    Micros,
    /// A plain number.
    Count,
}

/// Which way a metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Better {
    Higher,
    Lower,
}

/// One number per contender, and each one's ratio to the floor's.
#[derive(Debug, Serialize)]
pub(crate) struct Metric {
    pub(crate) name: &'static str,
    pub(crate) unit: Unit,
    pub(crate) better: Better,
    /// The metric that sums up the workload (one per workload).
    pub(crate) headline: bool,
    /// By contender name.
    pub(crate) values: BTreeMap<String, f64>,
    /// Value ÷ the floor's value, by contender name (not the floor's own).
    pub(crate) ratio_to_floor: BTreeMap<String, f64>,
    /// Headline only: the median over the rounds of the contender's slice
    /// value ÷ the floor's slice value in the same round, with its
    /// order-statistic interval, by contender name. Rounds where either
    /// value is missing or the floor's is 0 are left out.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) paired_ratio_to_floor: BTreeMap<String, MedianInterval>,
}

/// A value with its unit, short enough for a table cell.
pub(crate) fn show(unit: Unit, v: f64) -> String {
    match unit {
        Unit::PerSecond if v >= 10_000.0 => format!("{:.0}k/s", v / 1e3),
        Unit::PerSecond => format!("{v:.0}/s"),
        Unit::Micros => show_micros(v),
        Unit::Count if v >= 100.0 => format!("{v:.0}"),
        Unit::Count => format!("{v:.2}"),
    }
}

/// Microseconds as µs, ms or s with three significant digits.
pub(crate) fn show_micros(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// A ratio as `0.97×`, with at least two significant digits.
pub(crate) fn show_ratio(r: f64) -> String {
    let digits = match r {
        r if r >= 100.0 => 0,
        r if r >= 10.0 => 1,
        r if r >= 0.01 || r <= 0.0 => 2,
        r => (-r.log10()).ceil() as usize + 1,
    };
    format!("{r:.digits$}×")
}

/// A paired median ratio with its interval: `0.93× [0.90–0.95]`.
pub(crate) fn show_interval(p: &MedianInterval) -> String {
    let bare = |r: f64| show_ratio(r).trim_end_matches('×').to_owned();
    format!(
        "{} [{}–{}]",
        show_ratio(p.median),
        bare(p.low),
        bare(p.high)
    )
}

impl Report {
    /// The name of the floor's column.
    pub(crate) fn floor(&self) -> &str {
        self.subjects
            .iter()
            .find(|s| s.role == Role::Floor)
            .map_or("floor", |s| s.name.as_str())
    }

    /// The plain-text table printed on stdout.
    pub(crate) fn table(&self) -> String {
        let floor = self.floor();
        let others: Vec<&str> = self
            .subjects
            .iter()
            .filter(|s| s.role != Role::Floor)
            .map(|s| s.name.as_str())
            .collect();
        let mut header = vec!["workload".to_owned(), "metric".to_owned()];
        header.extend(self.subjects.iter().map(|s| s.name.clone()));
        header.extend(others.iter().map(|o| format!("{o} ÷ {floor}")));
        header.push("better".to_owned());
        let mut rows = vec![header];
        for w in &self.workloads {
            for (i, m) in w.metrics.iter().enumerate() {
                let mut row = vec![
                    if i == 0 { w.workload.id() } else { "" }.to_owned(),
                    m.name.to_owned(),
                ];
                row.extend(self.subjects.iter().map(|s| {
                    m.values
                        .get(&s.name)
                        .map_or_else(|| "–".to_owned(), |v| show(m.unit, *v))
                }));
                row.extend(others.iter().map(|o| {
                    match (m.paired_ratio_to_floor.get(*o), m.ratio_to_floor.get(*o)) {
                        (Some(p), _) => show_interval(p),
                        (None, Some(r)) => show_ratio(*r),
                        (None, None) => "–".to_owned(),
                    }
                }));
                row.push(
                    match m.better {
                        Better::Higher => "higher",
                        Better::Lower => "lower",
                    }
                    .to_owned(),
                );
                rows.push(row);
            }
        }
        let columns = rows[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = format!(
            "distlock bench: {} ({}), {} clients, {} names, {} per contender and workload \
             in {} interleaved slices\n\n",
            self.backend,
            self.url,
            self.settings.clients,
            self.settings.names,
            show_micros(self.settings.share_ms * 1e3),
            self.settings.slices,
        );
        let confidence = self
            .workloads
            .iter()
            .flat_map(|w| &w.metrics)
            .flat_map(|m| m.paired_ratio_to_floor.values())
            .map(|p| p.confidence)
            .fold(f64::INFINITY, f64::min);
        if confidence.is_finite() {
            let _ = writeln!(
                out,
                "Headline ratios: median of the {} per-slice ratios to the floor's slice in the \
                 same round [order-statistic interval of the median, ≥ {:.0} % confidence]; \
                 other rows: totals ÷ the floor's totals.\n",
                self.settings.slices,
                (confidence * 100.0).floor(),
            );
        }
        for (n, row) in rows.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                // Text columns align left, numbers right.
                if c < 2 || c == columns - 1 {
                    let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
                } else {
                    let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if n == 0 {
                let total = widths.iter().sum::<usize>() + 2 * (columns - 1);
                out.push_str(&"─".repeat(total));
                out.push('\n');
            }
        }
        if !self.hand_off_in_floor_commands.is_empty() {
            let each: Vec<String> = self
                .subjects
                .iter()
                .filter_map(|s| {
                    let r = self.hand_off_in_floor_commands.get(&s.name)?;
                    Some(format!("{} {}", s.name, show_ratio(*r)))
                })
                .collect();
            let _ = writeln!(
                out,
                "\nhand-off p50 in the floor's single commands (its uncontended acquire p50): {}",
                each.join(", ")
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_in_their_units() {
        assert_eq!(show(Unit::PerSecond, 182.4), "182/s");
        assert_eq!(show(Unit::PerSecond, 251_000.0), "251k/s");
        assert_eq!(show_micros(8.25), "8.25 µs");
        assert_eq!(show_micros(5_432.0), "5.43 ms");
        assert_eq!(show_ratio(0.934), "0.93×");
        assert_eq!(show_ratio(0.00123), "0.0012×");
        assert_eq!(show_ratio(209.4), "209×");
    }
}
