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
mod sweep;
mod target;
mod url;
mod workload;

use std::path::Path;

use distlock::Result;

use super::args::BenchArgs;
use super::exit;
use progress::Progress;
use report::{Machine, Report, WorkloadReport};
use sweep::Sweep;
use target::Target;
use workload::Plan;
pub(crate) use workload::Workload;

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
    let machine = Machine {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
    };
    let date = date::today();
    if args.sweep {
        return sweep(targets, &args, date, machine).await;
    }
    // One plan for every target, so each contender of each backend gets the
    // same share of each workload in the same number of slices.
    let plan = Plan::new(
        clients,
        args.names
            .map_or(clients, |k| usize::try_from(k).unwrap_or(usize::MAX)),
        args.duration,
        most_contenders(&targets),
        args.slice,
    );

    let workloads = chosen(&args.workload);
    let mut progress = Progress::new(&plan, targets.len(), workloads.len());
    for workload in workloads {
        let underway = progress.start(workload);
        let measured = measure(&mut targets, workload, &plan).await?;
        progress.finish(underway, &measured);
        for (backend, m) in measured {
            if let Some(target) = targets.iter_mut().find(|t| t.backend() == backend) {
                target.keep(m);
            }
        }
    }

    let reports: Vec<Report> = targets
        .into_iter()
        .map(|t| t.report(&plan, date.clone(), machine.clone()))
        .collect();
    let mut written = Vec::new();
    for report in &reports {
        print!("{}", report.table());
        written.push(write(
            &format!("bench-{}", report.backend),
            report,
            &chart::svg(report),
            &args.out,
        ));
    }
    if reports.len() > 1
        && let Some(all) = compare::comparison(&reports)
    {
        println!();
        print!("{}", all.table());
        written.push(write(
            "bench-comparison",
            &all,
            &chart::svg(&all),
            &args.out,
        ));
        let brief = args.out.join("bench-comparison.md");
        written.push(
            std::fs::write(&brief, compare::summary(&all))
                .map_err(|e| format!("cannot write {}: {e}", brief.display())),
        );
    }
    finish(written)
}

/// The workloads `--workload` names, in the order they run; all of them
/// when it names none.
fn chosen(named: &[Workload]) -> Vec<Workload> {
    Workload::ALL
        .into_iter()
        .filter(|w| named.is_empty() || named.contains(w))
        .collect()
}

/// The most contenders any target has: the plan divides each workload's
/// time among that many.
fn most_contenders(targets: &[Target]) -> usize {
    targets.iter().map(Target::contenders).max().unwrap_or(1)
}

/// Runs `workload` on every target that runs it, the targets taking turns
/// round by round like the contenders of one target do. Returns each such
/// target's backend and measurements, in the order of `targets`.
async fn measure(
    targets: &mut [Target],
    workload: Workload,
    plan: &Plan,
) -> Result<Vec<(&'static str, WorkloadReport)>> {
    let mut running: Vec<&mut Target> = targets.iter_mut().filter(|t| t.runs(workload)).collect();
    for target in running.iter_mut() {
        target.begin(workload, plan);
    }
    for round in 0..plan.slices as usize {
        for k in 0..running.len() {
            let i = (round + k) % running.len();
            running[i].round(workload, plan, round).await?;
        }
    }
    // Parts that take longer than a slice, once per target.
    for target in running.iter_mut() {
        target.failovers(workload, plan).await?;
    }
    Ok(running
        .into_iter()
        .map(|t| (t.backend(), t.finish(workload, plan)))
        .collect())
}

/// `--sweep`: each workload of the sweep at each point of its axis.
async fn sweep(
    mut targets: Vec<Target>,
    args: &BenchArgs,
    date: String,
    machine: Machine,
) -> Result<u8> {
    let clients = usize::from(args.clients);
    let named = chosen(&args.workload);
    let chosen_points: Vec<usize> = args.points.iter().map(|&n| usize::from(n)).collect();
    let axes: Vec<(Workload, &str, Vec<usize>)> = sweep::AXES
        .iter()
        .filter(|a| named.contains(&a.workload))
        .map(|a| {
            // Chosen client counts replace the axis's, down to its
            // smallest (hand-off and wake-ups need a waiter).
            let points = if a.varies == "clients" && !chosen_points.is_empty() {
                chosen_points
                    .iter()
                    .copied()
                    .filter(|x| *x >= a.points[0])
                    .collect()
            } else {
                a.points.to_vec()
            };
            (a.workload, a.varies, points)
        })
        .collect();
    let points: usize = axes.iter().map(|a| a.2.len()).sum();
    if points == 0 {
        eprintln!(
            "distlock: --sweep has nothing to run: its workloads are contended, hand-off, \
             wake-ups and many-names, and hand-off and wake-ups start at 4 clients"
        );
        return Ok(exit::USAGE);
    }
    eprintln!(
        "distlock bench --sweep: {points} points of {:.1}s per backend; about {:.0}s in all",
        args.duration.as_secs_f64(),
        (args.duration * u32::try_from(points * targets.len()).unwrap_or(u32::MAX)).as_secs_f64(),
    );
    let duration_ms = args.duration.as_secs_f64() * 1e3;
    let mut sweeps: Vec<Sweep> = targets
        .iter()
        .map(|t| Sweep::new(t, date.clone(), machine.clone(), duration_ms))
        .collect();
    for (workload, varies, xs) in &axes {
        for &x in xs {
            let (n, k) = match *varies {
                "names" => (clients, x),
                _ => (x, 1),
            };
            let plan = Plan::new(n, k, args.duration, most_contenders(&targets), args.slice);
            let started = std::time::Instant::now();
            let measured = measure(&mut targets, *workload, &plan).await?;
            eprintln!(
                "{:<12} {x:>6} {varies}  {:>5.1}s",
                workload.id(),
                started.elapsed().as_secs_f64()
            );
            for (sweep, (_, m)) in sweeps.iter_mut().zip(&measured) {
                sweep.add(varies, x, m);
            }
        }
    }
    let mut written = Vec::new();
    for sweep in &sweeps {
        print!("{}", sweep.table());
        written.push(write(
            &format!("bench-sweep-{}", sweep.backend),
            sweep,
            &chart::sweep::svg(sweep),
            &args.out,
        ));
    }
    finish(written)
}

fn finish(written: Vec<std::result::Result<(), String>>) -> Result<u8> {
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

/// Writes `STEM.json` (the data) and `STEM.svg` (the chart) into `dir`.
fn write(
    stem: &str,
    data: &impl serde::Serialize,
    svg: &str,
    dir: &Path,
) -> std::result::Result<(), String> {
    let json = dir.join(format!("{stem}.json"));
    let chart = dir.join(format!("{stem}.svg"));
    let data = serde_json::to_string_pretty(data)
        .map_err(|e| format!("cannot encode the results: {e}"))?;
    for (path, body) in [(&json, data.as_str()), (&chart, svg)] {
        std::fs::write(path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    eprintln!("distlock: wrote {} and {}", json.display(), chart.display());
    Ok(())
}
