//! `distlock torture`: the fault suite's client side against any URL.

use std::time::Duration;

use distlock::{Capabilities, Error, Result};
use distlock_torture::{Calm, KillHolder, Nemesis, PauseHolder, RunPlan, WorkerPlan};

use super::args::{TortureArgs, TortureWorkerArgs};
use super::exit;

/// A run broke a promise the backend makes.
const BROKEN: u8 = 1;

/// `--ttl` when not given, unless the backend's shortest TTL is longer.
const DEFAULT_TTL: Duration = Duration::from_secs(2);

/// The TTL of a run: `--ttl`, or the default the backend accepts.
fn ttl_of(asked: Option<Duration>, capabilities: &Capabilities) -> Duration {
    asked.unwrap_or(DEFAULT_TTL.max(capabilities.min_ttl))
}

pub(crate) async fn torture(args: TortureArgs) -> Result<u8> {
    // Connecting first turns a bad URL or an unreachable service into one
    // clear error instead of a worker log full of them.
    let locker = distlock::connect(&args.url).await?;
    let capabilities = locker.capabilities();
    let ttl = ttl_of(args.ttl, &capabilities);
    capabilities.check_ttl(ttl)?;
    let lock = args.lock();
    capabilities.check_kind(lock.whole().0)?;
    let strict = capabilities.fencing == distlock::Fencing::Strict;
    drop(locker);

    let exe = std::env::current_exe()
        .map_err(|e| Error::backend(format!("cannot find the distlock binary: {e}")))?;
    let temp = tempfile_dir()?;
    let dir = args.keep.clone().unwrap_or_else(|| temp.clone());
    let worker = vec![exe.display().to_string(), "__torture-worker".to_owned()];
    let mut plan = RunPlan::new(&args.url, ttl, args.duration, worker, &dir);
    plan.clients = usize::from(args.clients);
    plan.locks = vec![lock];
    let mut nemesis: Box<dyn Nemesis> = if args.pause {
        Box::<PauseHolder>::default()
    } else if args.kill {
        Box::new(KillHolder)
    } else {
        Box::new(Calm)
    };
    let label = nemesis.label();
    eprintln!(
        "distlock torture: {} workers take a {lock} on {} for {:?} (TTL {:?}, fault: {label})",
        plan.clients, capabilities.backend, args.duration, ttl
    );
    if !capabilities.shared_across_processes {
        eprintln!(
            "distlock torture: {} keeps its locks inside each process: the workers will not exclude each other",
            capabilities.backend
        );
    }
    let outcome = distlock_torture::run(plan, nemesis.as_mut()).await;
    if args.keep.is_none() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    let outcome = outcome.map_err(|e| Error::backend(format!("the run failed: {e}")))?;
    let figures = &outcome.locks[0].figures;
    if args.json {
        let json = serde_json::json!({
            "backend": capabilities.backend,
            "lock": lock.to_arg(),
            "fault": label,
            "strict_fencing": strict,
            "figures": figures,
        });
        println!("{json:#}");
    } else {
        print!(
            "{}",
            distlock_torture::report::table(lock, [(label.as_str(), figures)])
        );
    }
    if figures.grants == 0 {
        eprintln!(
            "distlock torture: no worker got the lock; their output:\n{}",
            outcome.worker_log
        );
        return Ok(exit::UNAVAILABLE);
    }
    let broken = figures.broken_promises(lock, strict);
    if broken.is_empty() {
        Ok(0)
    } else {
        eprintln!("distlock torture: broken promises: {}", broken.join(", "));
        Ok(BROKEN)
    }
}

pub(crate) async fn worker(args: TortureWorkerArgs) -> Result<u8> {
    let plan = WorkerPlan::from_args(&args.plan).map_err(Error::backend)?;
    let locker = distlock::connect(&plan.url).await?;
    distlock_torture::work(&locker, &plan)
        .await
        .map_err(|e| Error::backend(format!("worker: {e}")))?;
    Ok(0)
}

/// A fresh private directory for the run's files.
fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "distlock-torture-{}-{}",
        std::process::id(),
        distlock_torture::history::now_ns()
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::backend(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use distlock::Fencing;

    use super::*;

    #[test]
    fn the_default_ttl_is_one_the_backend_accepts() {
        let short = Capabilities::new("short", Fencing::Strict);
        assert_eq!(ttl_of(None, &short), DEFAULT_TTL);
        let long = short.with_ttl_range(Duration::from_secs(4), Capabilities::DEFAULT_MAX_TTL);
        assert_eq!(ttl_of(None, &long), Duration::from_secs(4));
        let asked = Some(Duration::from_millis(300));
        assert_eq!(
            ttl_of(asked, &long),
            Duration::from_millis(300),
            "checked later"
        );
    }
}
