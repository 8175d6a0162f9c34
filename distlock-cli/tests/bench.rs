//! `distlock bench` end to end, with workloads so short that the whole run
//! takes about a second: it must measure every workload against the floor
//! and write its table, data file and chart. Nothing here asserts speed.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_distlock");
const WORKLOADS: [&str; 8] = [
    "uncontended",
    "contended",
    "hand-off",
    "wake-ups",
    "many-names",
    "semaphore",
    "read-write",
    "election",
];

fn bench(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("bench")
        .args(args)
        .env_remove("DISTLOCK_URL")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Runs a short bench on `url` and checks everything it wrote to `out`.
fn bench_writes_everything(url: &str, backend: &str, out: &Path) {
    let run = bench(&[
        "--url",
        url,
        "--duration",
        "200ms",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("library ÷ floor"), "{table}");
    for workload in WORKLOADS {
        assert!(table.contains(workload), "{workload} missing from\n{table}");
        assert!(
            stderr.contains(workload),
            "no progress for {workload}: {stderr}"
        );
    }

    let svg = std::fs::read_to_string(out.join(format!("bench-{backend}.svg"))).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("<polyline"), "the chart has no latency lines");

    let data = std::fs::read_to_string(out.join(format!("bench-{backend}.json"))).unwrap();
    let report: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(report["backend"], backend);
    let workloads = report["workloads"].as_array().unwrap();
    let ids: Vec<&str> = workloads
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();
    assert_eq!(ids, WORKLOADS);
    for w in workloads {
        let metrics = w["metrics"].as_array().unwrap();
        let headline = metrics.iter().find(|m| m["headline"] == true).unwrap();
        assert!(
            headline["ratio_to_floor"]["library"].is_f64(),
            "{} has no library ÷ floor ratio: {headline}",
            w["workload"]
        );
        let subjects: Vec<&str> = w["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["subject"].as_str().unwrap())
            .collect();
        assert!(subjects.contains(&"library") && subjects.contains(&"floor"));
        // Every headline ratio (the library's at least) comes with the
        // median of the per-slice ratios to the floor, inside its interval.
        for subject in headline["ratio_to_floor"].as_object().unwrap().keys() {
            let paired = &headline["paired_ratio_to_floor"][subject];
            let [median, low, high, confidence] =
                ["median", "low", "high", "confidence"].map(|k| paired[k].as_f64());
            let (Some(median), Some(low), Some(high), Some(confidence)) =
                (median, low, high, confidence)
            else {
                panic!(
                    "{} has no paired {subject} ratio: {headline}",
                    w["workload"]
                );
            };
            assert!(low <= median && median <= high, "{paired}");
            assert!((0.0..=1.0).contains(&confidence), "{paired}");
            assert!(paired["n"].as_u64().is_some_and(|n| n >= 1), "{paired}");
        }
    }
    // The longest single wait for a grant, for every contender.
    let contended = &workloads[1]["metrics"];
    let max_wait = contended
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "max wait")
        .unwrap_or_else(|| panic!("no max wait in {contended}"));
    for run in workloads[1]["runs"].as_array().unwrap() {
        let subject = run["subject"].as_str().unwrap();
        assert!(
            max_wait["values"][subject]
                .as_f64()
                .is_some_and(|us| us > 0.0),
            "no max wait for {subject}: {max_wait}"
        );
    }
    assert!(table.contains("max wait"), "{table}");
    assert!(table.contains("order-statistic interval"), "{table}");
    let in_commands = &report["hand_off_in_floor_commands"];
    for subject in ["library", "floor"] {
        assert!(
            in_commands[subject].as_f64().is_some_and(|r| r > 0.0),
            "no hand-off in floor commands for {subject}: {in_commands}"
        );
    }
    assert!(
        table.contains("hand-off p50 in the floor's single commands"),
        "{table}"
    );
    // The election's leaders that die: every standby took over, after the
    // dying lease's TTL (1 s on these backends).
    let read_write = &workloads[6];
    for run in read_write["runs"].as_array().unwrap() {
        let (all, writes) = (run["acquisitions"].as_u64(), run["writes"].as_u64());
        assert!(
            writes.is_some_and(|w| w > 0 && Some(w) <= all),
            "the writer got in, and its grants are counted apart: {run}"
        );
        assert!(run["write_wait"]["p99_us"].is_f64(), "{run}");
    }
    assert!(table.contains("writer wait p99"), "{table}");
    let election = &workloads[7];
    for run in election["runs"].as_array().unwrap() {
        let failover = &run["failover"];
        assert_eq!(failover["samples"], 5, "{run}");
        assert!(
            failover["p50_us"]
                .as_f64()
                .is_some_and(|us| us >= 990_000.0),
            "{run}"
        );
        assert_eq!(run["failover_ttl_ms"], 1000.0, "{run}");
    }
    assert!(table.contains("failover past TTL p50"), "{table}");
}

#[test]
fn sqlite_is_measured_against_its_floor() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/bench.db", dir.path().display());
    bench_writes_everything(&url, "sqlite", &dir.path().join("results"));
}

#[test]
fn memory_is_measured_against_its_floor_and_a_peer() {
    let dir = tempfile::tempdir().unwrap();
    bench_writes_everything("memory://", "memory", dir.path());
    let data = std::fs::read_to_string(dir.path().join("bench-memory.json")).unwrap();
    let report: Value = serde_json::from_str(&data).unwrap();
    let uncontended = &report["workloads"][0]["metrics"][0]["ratio_to_floor"];
    assert!(uncontended["tokio-mutex"].is_f64(), "{uncontended}");
}

#[test]
fn bad_input_is_usage_and_an_unusable_backend_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let zero = bench(&["--url", "memory://", "--duration", "0s", "--out", out]);
    assert_eq!(zero.status.code(), Some(64));
    let one = bench(&["--url", "memory://", "--clients", "1", "--out", out]);
    assert_eq!(one.status.code(), Some(64), "hand-off needs a waiter");
    let missing = format!("sqlite://{}/no/such/dir/x.db", dir.path().display());
    let unreachable = bench(&["--url", &missing, "--out", out]);
    assert_eq!(unreachable.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("does not exist"));
}

#[test]
fn several_urls_are_measured_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}/bench.db", dir.path().display());
    let out = dir.path().join("results");
    let run = bench(&[
        "--url",
        &sqlite,
        "--url",
        "memory://",
        "--duration",
        "200ms",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // Each backend keeps its own report, measured against its own floor.
    for backend in ["sqlite", "memory"] {
        let data = std::fs::read_to_string(out.join(format!("bench-{backend}.json"))).unwrap();
        let report: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(report["backend"], backend);
        assert!(report["workloads"][0]["metrics"][0]["ratio_to_floor"]["library"].is_f64());
    }
    let data = std::fs::read_to_string(out.join("bench-comparison.json")).unwrap();
    let all: Value = serde_json::from_str(&data).unwrap();
    let subjects: Vec<&str> = all["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["sqlite", "memory", "memory/tokio-mutex"]);
    let workloads = all["workloads"].as_array().unwrap();
    assert_eq!(workloads.len(), WORKLOADS.len());
    for w in workloads {
        let headline = &w["metrics"][0];
        for backend in ["sqlite", "memory"] {
            let paired = &headline["paired_ratio_to_floor"][backend];
            assert!(
                paired["median"].is_f64(),
                "{} {backend}: {headline}",
                w["workload"]
            );
            assert!(headline["values"][backend].is_f64(), "{headline}");
        }
        assert!(headline["values"].get("floor").is_none(), "{headline}");
    }
    let brief = std::fs::read_to_string(out.join("bench-comparison.md")).unwrap();
    assert!(
        brief.contains("| sqlite |") && brief.contains("| memory/tokio-mutex |"),
        "{brief}"
    );
    assert!(
        brief.contains("election (resign p50)") && brief.contains("election (failover p50)"),
        "{brief}"
    );
    let svg = std::fs::read_to_string(out.join("bench-comparison.svg")).unwrap();
    assert!(svg.contains("comparison") && svg.trim_end().ends_with("</svg>"));
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(
        table.contains("sqlite ÷ floor") && table.contains("memory ÷ floor"),
        "{table}"
    );

    let twice = bench(&[
        "--url",
        "memory://",
        "--url",
        "memory://",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(twice.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&twice.stderr).contains("same backend"));
}

#[test]
fn a_sweep_follows_each_workload_along_its_axis() {
    let dir = tempfile::tempdir().unwrap();
    let run = bench(&[
        "--url",
        "memory://",
        "--sweep",
        "--duration",
        // Long enough that every contender completes acquisitions in its
        // slices at 256 clients, even on a loaded machine.
        "300ms",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let data = std::fs::read_to_string(dir.path().join("bench-sweep-memory.json")).unwrap();
    let sweep: Value = serde_json::from_str(&data).unwrap();
    let series = sweep["series"].as_array().unwrap();
    let axis = |workload: &str, metric: &str| -> Vec<u64> {
        let s = series
            .iter()
            .find(|s| s["workload"] == workload && s["metric"] == metric)
            .unwrap_or_else(|| panic!("no {workload} {metric} in {series:?}"));
        s["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                assert!(p["values"]["library"].is_f64(), "{p}");
                assert!(p["values"]["floor"].is_f64(), "{p}");
                p["x"].as_u64().unwrap()
            })
            .collect()
    };
    assert_eq!(axis("contended", "acquisitions/s"), [1, 4, 16, 64, 256]);
    assert_eq!(axis("hand-off", "hand-off p50"), [4, 16, 64, 256]);
    assert_eq!(axis("wake-ups", "attempts per release"), [4, 16, 64, 256]);
    assert_eq!(axis("many-names", "pairs/s"), [10, 1_000, 100_000]);
    let svg = std::fs::read_to_string(dir.path().join("bench-sweep-memory.svg")).unwrap();
    assert!(svg.contains("<polyline") && svg.trim_end().ends_with("</svg>"));
}

#[test]
fn workloads_and_sweep_points_can_be_picked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let run = bench(&[
        "--url",
        "memory://",
        "--workload",
        "read-write",
        "--workload",
        "contended",
        "--duration",
        "200ms",
        "--out",
        out,
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("2 workloads"), "{stderr}");
    let data = std::fs::read_to_string(dir.path().join("bench-memory.json")).unwrap();
    let report: Value = serde_json::from_str(&data).unwrap();
    let ids: Vec<&str> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();
    // In the order they always run, whatever the order asked.
    assert_eq!(ids, ["contended", "read-write"]);

    let run = bench(&[
        "--url",
        "memory://",
        "--sweep",
        "--workload",
        "hand-off",
        "--workload",
        "semaphore",
        "--points",
        "2,256",
        "--duration",
        "300ms",
        "--out",
        out,
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let data = std::fs::read_to_string(dir.path().join("bench-sweep-memory.json")).unwrap();
    let sweep: Value = serde_json::from_str(&data).unwrap();
    let series = sweep["series"].as_array().unwrap();
    assert!(
        series.iter().all(|s| s["workload"] == "hand-off"),
        "{series:?}"
    );
    // Hand-off needs a waiter: 2 is below its axis, so only 256 is left.
    let xs: Vec<u64> = series[0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["x"].as_u64().unwrap())
        .collect();
    assert_eq!(xs, [256]);

    // A sweep of no workload it has, or of no point it can run: usage.
    for args in [
        &["--workload", "semaphore"][..],
        &["--workload", "hand-off", "--points", "2"][..],
    ] {
        let empty = bench(&[&["--url", "memory://", "--sweep", "--out", out][..], args].concat());
        assert_eq!(empty.status.code(), Some(64), "{args:?}");
        assert!(
            String::from_utf8_lossy(&empty.stderr).contains("nothing to run"),
            "{args:?}"
        );
    }

    let bad = bench(&["--url", "memory://", "--workload", "nap", "--out", out]);
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("read-write"));
}
