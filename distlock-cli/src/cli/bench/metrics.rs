//! The metrics of each workload: which numbers a run is judged by, and
//! each contender's ratio to the floor, pooled and paired by round.

use std::collections::BTreeMap;

use super::report::{Better, Metric, Unit, WorkloadReport};
use super::stats::MedianInterval;
use super::workload::{Run, Workload};

/// How to read one metric out of a run.
struct Spec {
    name: &'static str,
    unit: Unit,
    better: Better,
    value: fn(&Run) -> Option<f64>,
}

const fn spec(
    name: &'static str,
    unit: Unit,
    better: Better,
    value: fn(&Run) -> Option<f64>,
) -> Spec {
    Spec {
        name,
        unit,
        better,
        value,
    }
}

fn rate(r: &Run) -> Option<f64> {
    Some(r.rate())
}
fn p50(r: &Run) -> Option<f64> {
    r.latency.as_ref().map(|d| d.p50_us)
}
fn acquire_p50(r: &Run) -> Option<f64> {
    r.acquire_p50_us
}
fn p99(r: &Run) -> Option<f64> {
    r.latency.as_ref().map(|d| d.p99_us)
}
fn max(r: &Run) -> Option<f64> {
    r.latency.as_ref().map(|d| d.max_us)
}
fn fairness(r: &Run) -> Option<f64> {
    r.fairness()
}
fn attempts_per_release(r: &Run) -> Option<f64> {
    r.per_release(r.busy_attempts)
}
fn notices_per_release(r: &Run) -> Option<f64> {
    r.per_release(r.notices)
}

/// The metrics of each workload, headline first.
fn specs(w: Workload) -> Vec<Spec> {
    use Better::{Higher, Lower};
    use Unit::{Count, Micros, PerSecond};
    match w {
        Workload::Uncontended | Workload::ManyNames => vec![
            spec("pairs/s", PerSecond, Higher, rate),
            spec("pair p50", Micros, Lower, p50),
            spec("pair p99", Micros, Lower, p99),
            spec("acquire p50", Micros, Lower, acquire_p50),
        ],
        Workload::Contended => vec![
            spec("acquisitions/s", PerSecond, Higher, rate),
            spec("wait p50", Micros, Lower, p50),
            spec("wait p99", Micros, Lower, p99),
            spec("max wait", Micros, Lower, max),
            spec("fairness max/min", Count, Lower, fairness),
        ],
        Workload::Semaphore => vec![
            spec("acquisitions/s", PerSecond, Higher, rate),
            spec("wait p50", Micros, Lower, p50),
            spec("wait p99", Micros, Lower, p99),
            spec("fairness max/min", Count, Lower, fairness),
        ],
        Workload::HandOff => vec![
            spec("hand-off p50", Micros, Lower, p50),
            spec("hand-off p99", Micros, Lower, p99),
        ],
        Workload::Wakeups => vec![
            spec("attempts per release", Count, Lower, attempts_per_release),
            spec("notices per release", Count, Lower, notices_per_release),
            spec("acquisitions/s", PerSecond, Higher, rate),
        ],
    }
}

/// Compares every run of `workload` with the floor's run; `slices` holds
/// each contender's per-slice runs, in the order of `runs`, round by round.
pub(crate) fn metrics(
    workload: Workload,
    runs: &[Run],
    slices: &[Vec<Run>],
    floor: &str,
) -> Vec<Metric> {
    specs(workload)
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let values: BTreeMap<String, f64> = runs
                .iter()
                .filter_map(|r| Some((r.subject.clone(), (spec.value)(r)?)))
                .collect();
            let base = values.get(floor).copied().filter(|f| *f > 0.0);
            let ratio_to_floor = values
                .iter()
                .filter(|(name, _)| name.as_str() != floor)
                .filter_map(|(name, v)| Some((name.clone(), v / base?)))
                .collect();
            let paired_ratio_to_floor = if i == 0 {
                paired(runs, slices, floor, spec.value)
            } else {
                BTreeMap::new()
            };
            Metric {
                name: spec.name,
                unit: spec.unit,
                better: spec.better,
                headline: i == 0,
                values,
                ratio_to_floor,
                paired_ratio_to_floor,
            }
        })
        .collect()
}

/// Each non-floor contender's per-round ratios to the floor, summed up as
/// their median and its interval.
fn paired(
    runs: &[Run],
    slices: &[Vec<Run>],
    floor: &str,
    value: fn(&Run) -> Option<f64>,
) -> BTreeMap<String, MedianInterval> {
    let Some(base) = runs
        .iter()
        .position(|r| r.subject == floor)
        .and_then(|i| slices.get(i))
    else {
        return BTreeMap::new();
    };
    runs.iter()
        .zip(slices)
        .filter(|(r, _)| r.subject != floor)
        .filter_map(|(r, mine)| {
            let ratios = mine
                .iter()
                .zip(base)
                .filter_map(|(m, f)| Some(value(m)? / value(f).filter(|f| *f > 0.0)?))
                .collect();
            Some((r.subject.clone(), MedianInterval::of(ratios)?))
        })
        .collect()
}

/// Each contender's hand-off p50 divided by the floor's uncontended acquire
/// p50, which is one command's round trip.
pub(crate) fn hand_off_in_commands(
    workloads: &[WorkloadReport],
    floor: &str,
) -> BTreeMap<String, f64> {
    let runs = |w: Workload| {
        workloads
            .iter()
            .find(|r| r.workload == w)
            .map_or(&[][..], |r| &r.runs[..])
    };
    let Some(command) = runs(Workload::Uncontended)
        .iter()
        .find(|r| r.subject == floor)
        .and_then(acquire_p50)
        .filter(|c| *c > 0.0)
    else {
        return BTreeMap::new();
    };
    runs(Workload::HandOff)
        .iter()
        .filter_map(|r| Some((r.subject.clone(), p50(r)? / command)))
        .collect()
}
