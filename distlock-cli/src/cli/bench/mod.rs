//! `distlock bench`: the library against each backend's raw primitive (the
//! floor) on the same store in the same run, so results read as ratios that
//! hold from one machine to the next. docs/BENCHMARKS.md explains the
//! workloads and how a backend adds its floor and peers.

mod chart;
mod contender;
mod counting;
mod date;
mod floor;
mod metrics;
mod peer;
mod progress;
mod report;
mod stats;
mod workload;

use std::path::Path;
use std::sync::Arc;

use distlock::Result;

use super::args::BenchArgs;
use super::exit;
use contender::{Contender, Library};
use counting::Counting;
use progress::Progress;
use report::{Machine, Report, Settings, WorkloadReport};
use workload::{HOLD, Plan, Run, Slice, Workload};

pub(crate) async fn bench(args: BenchArgs) -> Result<u8> {
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!(
            "distlock: cannot create the --out directory {}: {e}",
            args.out.display()
        );
        return Ok(exit::USAGE);
    }
    let locker = distlock::connect(&args.url).await?;
    let backend = locker.capabilities().backend;
    let ttl = locker.defaults().ttl;
    let (library, counted): (Arc<dyn Contender>, Arc<dyn Contender>) = if Counting::fits(&args.url)
    {
        (
            Arc::new(Library::new(locker.clone())),
            Arc::new(Library::counted(&locker)),
        )
    } else if locker.capabilities().server_side_wait {
        // Counts its wake-ups itself, in every workload.
        let own: Arc<dyn Contender> = Arc::new(Library::with_notices(locker.clone()));
        (own.clone(), own)
    } else {
        let plain: Arc<dyn Contender> = Arc::new(Library::new(locker.clone()));
        (plain.clone(), plain)
    };
    let floor = floor::connect(backend, &args.url, ttl).await?;
    let peers = peer::for_backend(&args.url, ttl).await?;
    let mut contenders = vec![floor.clone(), library.clone()];
    contenders.extend(peers.iter().cloned());
    let clients = usize::from(args.clients);
    let plan = Plan::new(
        clients,
        args.names.map_or(clients, usize::from),
        args.duration,
        contenders.len(),
    );

    let mut workloads = Vec::new();
    let mut progress = Progress::new(&plan);
    for workload in Workload::ALL {
        // The counting wrapper costs a little per call, so only the workload
        // that needs its counts pays for it.
        contenders[1] = match workload {
            Workload::Wakeups => counted.clone(),
            _ => library.clone(),
        };
        let underway = progress.start(workload);
        let mut totals: Vec<Slice> = contenders.iter().map(|_| Slice::default()).collect();
        // Each contender's slices, round by round, for the paired ratios.
        let mut slices: Vec<Vec<Run>> = contenders
            .iter()
            .map(|_| Vec::with_capacity(plan.slices as usize))
            .collect();
        for round in 0..plan.slices as usize {
            // Each round starts with the next contender, so none always
            // follows the same one.
            for k in 0..contenders.len() {
                let i = (round + k) % contenders.len();
                let slice = workload.slice(&contenders[i], &plan).await?;
                slices[i].push(slice.summary(&contenders[i].subject().name));
                totals[i].merge(slice);
            }
        }
        let runs: Vec<_> = totals
            .into_iter()
            .zip(&contenders)
            .map(|(total, c)| total.into_run(c.subject().name))
            .collect();
        progress.finish(underway, &runs);
        workloads.push(WorkloadReport {
            workload,
            describe: workload.describe(&plan),
            latency: workload.latency(),
            metrics: metrics::metrics(workload, &runs, &slices, &floor.subject().name),
            runs,
        });
    }

    let report = Report {
        backend,
        url: distlock::url::redact(&args.url),
        date: date::today(),
        machine: Machine {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        },
        settings: Settings {
            clients: plan.clients,
            names: plan.names,
            duration_ms: plan.duration.as_secs_f64() * 1e3,
            share_ms: plan.share().as_secs_f64() * 1e3,
            slices: plan.slices,
            hold_ms: HOLD.as_secs_f64() * 1e3,
            ttl_ms: ttl.as_secs_f64() * 1e3,
        },
        subjects: [&library, &floor]
            .into_iter()
            .chain(&peers)
            .map(|c| c.subject())
            .collect(),
        hand_off_in_floor_commands: metrics::hand_off_in_commands(
            &workloads,
            &floor.subject().name,
        ),
        workloads,
    };
    print!("{}", report.table());
    match write(&report, &args.out) {
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
