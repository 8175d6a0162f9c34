//! Several backends side by side (`--url A --url B …`): one report whose
//! contenders are each backend's library and peers, named after the
//! backend, with every ratio still to that backend's own floor. It prints,
//! serialises and draws like any other report.

use std::collections::BTreeMap;

use super::contender::{Role, Subject};
use super::report::{Metric, Report, WorkloadReport};
use super::workload::Workload;

/// The backend's own name for its library, `backend/peer` for a peer.
fn rename(backend: &str, subject: &Subject) -> String {
    match subject.role {
        Role::Peer => format!("{backend}/{}", subject.name),
        Role::Library | Role::Floor => backend.to_owned(),
    }
}

/// The reports of one run over several URLs, which share their plan and
/// workloads, as one.
pub(crate) fn comparison(reports: &[Report]) -> Option<Report> {
    let first = reports.first()?;
    let mut subjects = Vec::new();
    // Every workload any backend ran, in the order they ran: a backend
    // without semaphores has no semaphore workload.
    let mut workloads: Vec<WorkloadReport> = Vec::new();
    for w in reports.iter().flat_map(|r| &r.workloads) {
        if workloads.iter().any(|mine| mine.workload == w.workload) {
            continue;
        }
        workloads.push(WorkloadReport {
            workload: w.workload,
            describe: w.describe.clone(),
            latency: w.latency,
            runs: Vec::new(),
            metrics: w
                .metrics
                .iter()
                .map(|m| Metric {
                    name: m.name,
                    unit: m.unit,
                    better: m.better,
                    headline: m.headline,
                    values: BTreeMap::new(),
                    ratio_to_floor: BTreeMap::new(),
                    paired_ratio_to_floor: BTreeMap::new(),
                })
                .collect(),
        });
    }
    let mut hand_off = BTreeMap::new();
    for report in reports {
        let floor = report.floor();
        // Old name → new name, floor left out.
        let names: BTreeMap<&str, String> = report
            .subjects
            .iter()
            .filter(|s| s.role != Role::Floor)
            .map(|s| (s.name.as_str(), rename(report.backend, s)))
            .collect();
        subjects.extend(
            report
                .subjects
                .iter()
                .filter(|s| s.role != Role::Floor)
                .map(|s| Subject {
                    role: s.role,
                    name: names[s.name.as_str()].clone(),
                    detail: format!("{} ({})", s.detail, report.url),
                }),
        );
        let rekey = |from: &BTreeMap<String, f64>, into: &mut BTreeMap<String, f64>| {
            for (name, v) in from {
                if let Some(new) = names.get(name.as_str()) {
                    into.insert(new.clone(), *v);
                }
            }
        };
        rekey(&report.hand_off_in_floor_commands, &mut hand_off);
        for theirs in &report.workloads {
            let Some(mine) = workloads.iter_mut().find(|w| w.workload == theirs.workload) else {
                continue;
            };
            mine.runs.extend(
                theirs
                    .runs
                    .iter()
                    .filter(|r| r.subject != floor)
                    .filter_map(|r| {
                        let mut run = r.clone();
                        run.subject = names.get(r.subject.as_str())?.clone();
                        Some(run)
                    }),
            );
            for (m, t) in mine.metrics.iter_mut().zip(&theirs.metrics) {
                rekey(&t.values, &mut m.values);
                rekey(&t.ratio_to_floor, &mut m.ratio_to_floor);
                for (name, p) in &t.paired_ratio_to_floor {
                    if let Some(new) = names.get(name.as_str()) {
                        m.paired_ratio_to_floor.insert(new.clone(), p.clone());
                    }
                }
            }
        }
    }
    Some(Report {
        backend: "comparison",
        url: reports
            .iter()
            .map(|r| r.url.as_str())
            .collect::<Vec<_>>()
            .join(" · "),
        date: first.date.clone(),
        machine: first.machine.clone(),
        settings: first.settings.clone(),
        subjects,
        workloads,
        hand_off_in_floor_commands: hand_off,
    })
}

/// Besides each workload's headline, the metrics the brief shows: the
/// election's failover, with the TTL that it waits out.
const ALSO_IN_BRIEF: [(Workload, &str); 2] = [
    (Workload::Election, "failover p50"),
    (Workload::Election, "dying leader's TTL"),
];

/// The comparison in brief, as Markdown (`bench-comparison.md`): a row per
/// backend (and peer), a column per workload, each cell the headline value
/// and its paired ratio to that backend's own floor; then the election's
/// failover and its TTL, values alone.
pub(crate) fn summary(all: &Report) -> String {
    use std::fmt::Write as _;

    let mut out = format!(
        "distlock bench, {} on {} cores ({} {}): {} clients, {} per contender and workload in \
         {} interleaved slices. Each cell: the headline value, then ÷ the backend's own floor, \
         median of the per-round ratios [95 % interval]; the election's failover and the TTL \
         its dying leaders held: values alone.\n\n| backend |",
        all.date,
        all.machine.cores,
        all.machine.os,
        all.machine.arch,
        all.settings.clients,
        super::report::show_micros(all.settings.share_ms * 1e3),
        all.settings.slices,
    );
    let columns: Vec<_> = all
        .workloads
        .iter()
        .flat_map(|w| {
            w.metrics
                .iter()
                .filter(|m| m.headline || ALSO_IN_BRIEF.contains(&(w.workload, m.name)))
                .map(move |m| (w.workload, m))
        })
        .collect();
    for (workload, metric) in &columns {
        let _ = write!(out, " {} ({}) |", workload.id(), metric.name);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(columns.len()));
    out.push('\n');
    for subject in &all.subjects {
        let _ = write!(out, "| {} |", subject.name);
        for (_, metric) in &columns {
            let value = metric.values.get(&subject.name);
            let ratio = metric.paired_ratio_to_floor.get(&subject.name);
            let cell = match (value, ratio) {
                (Some(v), Some(r)) => format!(
                    "{} · {}",
                    super::report::show(metric.unit, *v),
                    super::report::show_interval(r)
                ),
                (Some(v), None) => super::report::show(metric.unit, *v),
                _ => "–".to_owned(),
            };
            let _ = write!(out, " {cell} |");
        }
        out.push('\n');
    }
    out
}
