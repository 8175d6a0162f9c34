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
fn reads_per_second(r: &Run) -> Option<f64> {
    Some((r.acquisitions - r.writes?) as f64 / (r.elapsed_ms / 1e3))
}
fn writes_per_second(r: &Run) -> Option<f64> {
    Some(r.writes? as f64 / (r.elapsed_ms / 1e3))
}
fn write_p50(r: &Run) -> Option<f64> {
    r.write_wait.as_ref().map(|d| d.p50_us)
}
fn write_p99(r: &Run) -> Option<f64> {
    r.write_wait.as_ref().map(|d| d.p99_us)
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
fn failover_p50(r: &Run) -> Option<f64> {
    r.failover.as_ref().map(|d| d.p50_us)
}
fn failover_max(r: &Run) -> Option<f64> {
    r.failover.as_ref().map(|d| d.max_us)
}
fn dying_ttl(r: &Run) -> Option<f64> {
    r.failover_ttl_ms.map(|ms| ms * 1e3)
}
/// What the failover takes beyond the lease it waits out: the lease's round
/// trip and the backend's detection of the expiry.
fn failover_past_ttl(r: &Run) -> Option<f64> {
    Some(failover_p50(r)? - dying_ttl(r)?)
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
        Workload::ReadWrite => vec![
            spec("operations/s", PerSecond, Higher, rate),
            spec("reads/s", PerSecond, Higher, reads_per_second),
            spec("writes/s", PerSecond, Higher, writes_per_second),
            spec("reader wait p50", Micros, Lower, p50),
            spec("reader wait p99", Micros, Lower, p99),
            spec("writer wait p50", Micros, Lower, write_p50),
            spec("writer wait p99", Micros, Lower, write_p99),
        ],
        Workload::HandOff => vec![
            spec("hand-off p50", Micros, Lower, p50),
            spec("hand-off p99", Micros, Lower, p99),
        ],
        Workload::Election => vec![
            spec("resign p50", Micros, Lower, p50),
            spec("resign p99", Micros, Lower, p99),
            spec("failover p50", Micros, Lower, failover_p50),
            spec("failover max", Micros, Lower, failover_max),
            spec("failover past TTL p50", Micros, Lower, failover_past_ttl),
            spec("dying leader's TTL", Micros, Lower, dying_ttl),
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cli::bench::report::show_interval;
    use crate::cli::bench::stats::{Distribution, Samples};

    fn run(subject: &str, acquisitions: u64, busy: Option<u64>) -> Run {
        Run {
            subject: subject.to_owned(),
            elapsed_ms: 1000.0,
            acquisitions,
            per_client: vec![acquisitions],
            writes: None,
            write_wait: None,
            latency: None,
            acquire_p50_us: None,
            busy_attempts: busy,
            notices: None,
            failover: None,
            failover_ttl_ms: None,
        }
    }

    #[test]
    fn ratios_are_to_the_floor_and_skip_what_is_missing() {
        let runs = [run("library", 90, Some(10)), run("floor", 100, Some(0))];
        let m = metrics(Workload::Wakeups, &runs, &[], "floor");
        assert!(m[0].headline && !m[1].headline);
        assert_eq!(m[0].values["library"], 10.0 / 90.0);
        assert!(
            m[0].ratio_to_floor.is_empty(),
            "the floor's zero divides nothing"
        );
        assert_eq!(m[2].ratio_to_floor["library"], 0.9);
        assert!(!m[2].ratio_to_floor.contains_key("floor"));
    }

    #[test]
    fn headline_ratios_pair_slices_of_the_same_round() {
        let rounds = |name: &str, counts: &[u64]| -> Vec<Run> {
            counts.iter().map(|c| run(name, *c, None)).collect()
        };
        let library = rounds("library", &[90, 40, 100, 0, 95, 99, 180]);
        // The floor's fourth round got nothing: that pair is left out.
        let floor = rounds("floor", &[100, 50, 100, 0, 100, 100, 200]);
        let total = |r: &[Run]| run(&r[0].subject, r.iter().map(|r| r.acquisitions).sum(), None);
        let runs = [total(&library), total(&floor)];
        let m = metrics(Workload::Uncontended, &runs, &[library, floor], "floor");
        let p = &m[0].paired_ratio_to_floor["library"];
        // Ratios 0.8, 0.9, 0.9, 0.95, 0.99, 1.0: six pairs, so the whole
        // range at 1 − 2/64 confidence.
        assert_eq!(p.n, 6);
        assert!((p.median - 0.925).abs() < 1e-12, "{p:?}");
        assert_eq!((p.low, p.high), (0.8, 1.0));
        assert!((p.confidence - (1.0 - 2.0 / 64.0)).abs() < 1e-12);
        assert!(!p.low.is_nan() && m[1].paired_ratio_to_floor.is_empty());
        assert_eq!(show_interval(p), "0.93× [0.80–1.00]");
    }

    #[test]
    fn failover_is_read_against_the_ttl_it_waits_out() {
        let mut s = Samples::new();
        for ms in [1010, 1020, 1040] {
            s.record(Duration::from_millis(ms));
        }
        let dying = |name: &str| Run {
            failover: Distribution::of(&s, false),
            failover_ttl_ms: Some(1000.0),
            ..run(name, 10, None)
        };
        let m = metrics(Workload::Election, &[dying("library")], &[], "floor");
        let value = |name: &str| m.iter().find(|m| m.name == name).unwrap().values["library"];
        assert!((value("failover p50") - 1_020_000.0).abs() < 1_020.0);
        assert!((value("failover past TTL p50") - 20_000.0).abs() < 1_020.0);
        assert_eq!(value("dying leader's TTL"), 1_000_000.0);
        assert!(m[0].headline && m[0].name == "resign p50" && m[0].values.is_empty());
    }

    #[test]
    fn hand_off_is_counted_in_the_floors_single_commands() {
        let mut floor_pairs = run("floor", 100, None);
        floor_pairs.acquire_p50_us = Some(80.0);
        let handing = |name: &str, us| {
            let mut s = Samples::new();
            s.record(Duration::from_micros(us));
            Run {
                latency: Distribution::of(&s, true),
                ..run(name, 10, None)
            }
        };
        let report = |workload, runs| WorkloadReport {
            workload,
            describe: String::new(),
            latency: "",
            runs,
            metrics: Vec::new(),
        };
        let workloads = [
            report(Workload::Uncontended, vec![floor_pairs]),
            report(
                Workload::HandOff,
                vec![handing("library", 200), handing("floor", 120)],
            ),
        ];
        let x = hand_off_in_commands(&workloads, "floor");
        // Latencies are kept to three significant digits.
        assert!((x["library"] - 2.5).abs() < 2.5e-3, "{x:?}");
        assert!((x["floor"] - 1.5).abs() < 1.5e-3, "{x:?}");
        assert!(hand_off_in_commands(&workloads[1..], "floor").is_empty());
    }
}
