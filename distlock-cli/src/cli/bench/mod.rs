//! `distlock bench`: the library against each backend's raw primitive (the
//! floor) on the same store in the same run, so results read as ratios that
//! hold from one machine to the next. docs/BENCHMARKS.md explains the
//! workloads and how a backend adds its floor and peers.

mod chart;
mod compare;
mod contender;
mod counting;
mod date;
mod floor;
mod metrics;
mod peer;
mod progress;
mod report;
mod stats;
mod target;
mod workload;

use std::path::Path;

use distlock::Result;

use super::args::BenchArgs;
use super::exit;
use progress::Progress;
use report::{Machine, Report};
use target::Target;
use workload::{Plan, Workload};

pub(crate) async fn bench(args: BenchArgs) -> Result<u8> {
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!(
            "distlock: cannot create the --out directory {}: {e}",
            args.out.display()
        );
        return Ok(exit::USAGE);
    }
    let mut targets: Vec<Target> = Vec::with_capacity(args.url.len());
    for url in &args.url {
        let target = Target::open(url).await?;
        if let Some(same) = targets.iter().find(|t| t.backend() == target.backend()) {
            eprintln!(
                "distlock: two --url name the same backend ({}); their results would share one \
                 file. Run them in separate benches.",
                same.backend()
            );
            return Ok(exit::USAGE);
        }
        targets.push(target);
    }
    let clients = usize::from(args.clients);
    // One plan for every target, so each contender of each backend gets the
    // same share of each workload in the same number of slices.
    let plan = Plan::new(
        clients,
        args.names.map_or(clients, usize::from),
        args.duration,
        targets.iter().map(Target::contenders).max().unwrap_or(1),
    );

    let mut progress = Progress::new(&plan, targets.len());
    for workload in Workload::ALL {
        let underway = progress.start(workload);
        for target in &mut targets {
            target.begin(workload, &plan);
        }
        for round in 0..plan.slices as usize {
            // Targets take turns like contenders do, each round starting
            // with the next one.
            for k in 0..targets.len() {
                let i = (round + k) % targets.len();
                targets[i].round(workload, &plan, round).await?;
            }
        }
        let runs: Vec<_> = targets
            .iter_mut()
            .flat_map(|t| {
                let backend = t.backend();
                t.finish(workload, &plan)
                    .iter()
                    .map(move |r| (backend, r.subject.clone(), r.acquisitions))
                    .collect::<Vec<_>>()
            })
            .collect();
        progress.finish(underway, &runs);
    }

    let machine = Machine {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
    };
    let date = date::today();
    let reports: Vec<Report> = targets
        .into_iter()
        .map(|t| t.report(&plan, date.clone(), machine.clone()))
        .collect();
    let mut written = Vec::new();
    for report in &reports {
        print!("{}", report.table());
        written.push(write(report, &args.out));
    }
    if reports.len() > 1
        && let Some(all) = compare::comparison(&reports)
    {
        println!();
        print!("{}", all.table());
        written.push(write(&all, &args.out));
    }
    match written
        .into_iter()
        .collect::<std::result::Result<(), String>>()
    {
        Ok(()) => Ok(0),
        Err(e) => {
            eprintln!("distlock: {e}");
            Ok(exit::USAGE)
        }
    }
}

/// The scheme of `url` (what picks the backend, its floor and its peers).
fn scheme(url: &str) -> &str {
    url.split_once(':').map_or(url, |(s, _)| s)
}

/// Writes the data file and the chart into `dir`.
fn write(report: &Report, dir: &Path) -> std::result::Result<(), String> {
    let stem = format!("bench-{}", report.backend);
    let json = dir.join(format!("{stem}.json"));
    let svg = dir.join(format!("{stem}.svg"));
    let data = serde_json::to_string_pretty(report)
        .map_err(|e| format!("cannot encode the results: {e}"))?;
    for (path, body) in [(&json, data), (&svg, chart::svg(report))] {
        std::fs::write(path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    eprintln!("distlock: wrote {} and {}", json.display(), svg.display());
    Ok(())
}
