//! One run: worker processes taking one or more locks of one name side by
//! side while a nemesis strikes them all on one schedule, then a probe of
//! each lock and the checker's figures for each.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use lock_core::backend::async_trait;

use crate::checker::{Figures, check};
use crate::history::{Event, Follower, History, now_ns};
use crate::lock::Lock;
use crate::plan::WorkerPlan;
use crate::register::Register;
use crate::watch::{Phase, Watch};

/// What a run does.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The lock service.
    pub url: String,
    /// The name every worker takes.
    pub name: String,
    /// The locks of that name the workers take, each by workers of its
    /// own, side by side (a mutex, a semaphore and a read-write lock of one
    /// name are three locks).
    pub locks: Vec<Lock>,
    /// Worker processes per lock.
    pub clients: usize,
    /// How long the workers take the lock.
    pub duration: Duration,
    /// The lease each acquire asks for.
    pub ttl: Duration,
    /// The longest hold (keep it under a third of the TTL: a holder then
    /// never renews, and its promise is exactly its first lease).
    pub hold: Duration,
    /// How long one acquire waits before it fails.
    pub wait: Duration,
    /// Quiet time before the first fault and after each one.
    pub quiet: Duration,
    /// How long each fault lasts.
    pub fault: Duration,
    /// The program and leading arguments that run one worker; the
    /// [`WorkerPlan`]'s arguments follow.
    pub worker: Vec<String>,
    /// Where the histories, the registers and the workers' output go: a
    /// directory per lock (`mutex/history`, `semaphore/register`, …).
    pub dir: PathBuf,
}

impl RunPlan {
    /// A plan of the mutex with the usual proportions for `ttl`: holds of
    /// up to a fifth of it, faults of twice it, and quiet times of one TTL.
    pub fn new(
        url: &str,
        ttl: Duration,
        duration: Duration,
        worker: Vec<String>,
        dir: &Path,
    ) -> Self {
        Self {
            url: url.to_owned(),
            name: format!("torture-{:08x}", rand::random::<u32>()),
            locks: vec![Lock::Mutex],
            clients: 4,
            duration,
            ttl,
            hold: ttl / 5,
            wait: ttl * 4,
            quiet: ttl,
            fault: ttl * 2,
            worker,
            dir: dir.to_owned(),
        }
    }
}

/// A fault: started by [`inject`](Nemesis::inject), ended by
/// [`heal`](Nemesis::heal).
#[async_trait]
pub trait Nemesis: Send {
    /// A name without spaces, for the history and the report.
    fn label(&self) -> String;
    /// Starts the fault.
    async fn inject(&mut self, run: &Run) -> std::io::Result<()>;
    /// Ends it.
    async fn heal(&mut self, run: &Run) -> std::io::Result<()>;
}

/// A run in progress, as a nemesis sees it.
#[derive(Debug)]
pub struct Run {
    plan: RunPlan,
    /// The file that starts the workers (see [`WorkerPlan::start`]).
    start: PathBuf,
    groups: Vec<Group>,
}

/// The workers of one lock, and its history.
#[derive(Debug)]
struct Group {
    lock: Lock,
    dir: PathBuf,
    history: History,
    workers: Mutex<Vec<Child>>,
    watch: Mutex<Watch>,
}

impl Group {
    fn pids(&self) -> Vec<u32> {
        let workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers.iter().filter_map(Child::id).collect()
    }

    fn in_phase(&self, workers: &[u32], wanted: Phase) -> Vec<u32> {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        watch.in_phase(workers, wanted)
    }
}

impl Run {
    /// The plan.
    pub fn plan(&self) -> &RunPlan {
        &self.plan
    }

    /// The locks the workers take.
    pub fn locks(&self) -> Vec<Lock> {
        self.groups.iter().map(|g| g.lock).collect()
    }

    /// Every worker's process id.
    pub fn workers(&self) -> Vec<u32> {
        self.groups.iter().flat_map(Group::pids).collect()
    }

    /// A worker that holds one of the locks now, by the histories (it is
    /// in its hold); if none does within a TTL, any worker.
    pub async fn holder(&self) -> u32 {
        self.holder_among(&self.groups).await
    }

    /// A worker that holds `lock` now; if none does within a TTL, any
    /// worker of that lock (or of the run, if it has no such lock).
    pub async fn holder_of(&self, lock: Lock) -> u32 {
        let group = self.groups.iter().position(|g| g.lock == lock);
        match group {
            Some(at) => self.holder_among(&self.groups[at..=at]).await,
            None => self.holder().await,
        }
    }

    async fn holder_among(&self, groups: &[Group]) -> u32 {
        let deadline = tokio::time::Instant::now() + self.plan.ttl;
        loop {
            for group in groups {
                if let Some(pid) = group.in_phase(&group.pids(), Phase::Holding).first() {
                    return *pid;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let workers: Vec<u32> = groups.iter().flat_map(Group::pids).collect();
                return workers[rand::random_range(0..workers.len())];
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Stops a holder of each lock (its process group) with SIGSTOP and
    /// returns their pids. A holder is caught in its hold, never inside a
    /// register call: a worker stopped with the register's `flock` would
    /// stop every other worker too. So it is stopped, then the history is
    /// read again, and if it had gone on to its write meanwhile it is
    /// continued and another chance is taken. For a lock none of whose
    /// workers is caught holding within a TTL, a worker that is not in a
    /// register call is stopped instead.
    pub async fn pause_holders(&self) -> std::io::Result<Vec<u32>> {
        let deadline = tokio::time::Instant::now() + self.plan.ttl;
        let mut paused: Vec<Option<u32>> = vec![None; self.groups.len()];
        loop {
            let wanted = if tokio::time::Instant::now() < deadline {
                Phase::Holding
            } else {
                Phase::OutsideTheRegister
            };
            for (group, paused) in self.groups.iter().zip(&mut paused) {
                if paused.is_some() {
                    continue;
                }
                for pid in group.in_phase(&group.pids(), wanted) {
                    self.signal(pid, Signal::SIGSTOP)?;
                    if group.in_phase(&[pid], wanted) == [pid] {
                        *paused = Some(pid);
                        break;
                    }
                    self.signal(pid, Signal::SIGCONT)?;
                }
            }
            if paused.iter().all(Option::is_some) {
                return Ok(paused.into_iter().flatten().collect());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Whether every lock was granted to a worker after the last fault
    /// ended (or no fault has ended yet).
    pub fn granted_since_heal(&self) -> bool {
        self.groups.iter().all(|g| {
            let mut watch = g.watch.lock().unwrap_or_else(|p| p.into_inner());
            watch.granted_since_heal()
        })
    }

    /// Sends `signal` to a worker's process group.
    pub fn signal(&self, pid: u32, signal: Signal) -> std::io::Result<()> {
        killpg(Pid::from_raw(pid as i32), signal).map_err(std::io::Error::from)
    }

    /// Kills a worker with SIGKILL and starts another in its place, on the
    /// same lock.
    pub async fn replace(&self, pid: u32) -> std::io::Result<()> {
        for group in &self.groups {
            let old = {
                let mut workers = group.workers.lock().unwrap_or_else(|p| p.into_inner());
                let at = workers.iter().position(|c| c.id() == Some(pid));
                at.map(|at| workers.swap_remove(at))
            };
            let Some(mut old) = old else { continue };
            self.signal(pid, Signal::SIGKILL)?;
            old.wait().await?;
            let fresh = self.spawn(group, false)?;
            group
                .workers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(fresh);
        }
        Ok(())
    }

    /// Appends `event` to every lock's history.
    fn log(&self, event: &Event) -> std::io::Result<()> {
        self.groups
            .iter()
            .try_for_each(|g| g.history.log(event.clone()))
    }

    /// A worker of `group`, or its probe.
    fn spawn(&self, group: &Group, probe: bool) -> std::io::Result<Child> {
        let plan = WorkerPlan {
            url: self.plan.url.clone(),
            name: self.plan.name.clone(),
            lock: group.lock,
            probe,
            ttl: self.plan.ttl,
            hold: self.plan.hold,
            wait: self.plan.wait,
            start: self.start.clone(),
            history: group.history.path().to_owned(),
            register: group.dir.join("register"),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.plan.dir.join("workers.log"))?;
        Command::new(&self.plan.worker[0])
            .args(&self.plan.worker[1..])
            .args(plan.to_args())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own group, so a pause stops the whole worker.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    /// Each lock's figures, in the plan's order.
    pub locks: Vec<LockOutcome>,
    /// The tail of the workers' output, for failure messages.
    pub worker_log: String,
}

/// What a run produced for one lock.
#[derive(Debug)]
pub struct LockOutcome {
    /// The lock.
    pub lock: Lock,
    /// The checker's figures.
    pub figures: Figures,
    /// The history file.
    pub history: PathBuf,
}

/// Starts the workers of every lock, applies `nemesis` on the plan's
/// schedule until the duration is over, waits for the workers, probes each
/// lock, and checks each history.
pub async fn run(plan: RunPlan, nemesis: &mut dyn Nemesis) -> std::io::Result<Outcome> {
    let mut groups = Vec::new();
    for &lock in &plan.locks {
        let dir = plan.dir.join(lock.label());
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("history");
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(dir.join("register"));
        groups.push(Group {
            lock,
            history: History::open(&path)?,
            dir,
            workers: Mutex::new(Vec::new()),
            watch: Mutex::new(Watch::new(Follower::new(path))),
        });
    }
    let start = plan.dir.join("start");
    let _ = std::fs::remove_file(&start);
    let run = Run {
        plan,
        start,
        groups,
    };
    for group in &run.groups {
        for _ in 0..run.plan.clients {
            let child = run.spawn(group, false)?;
            group
                .workers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(child);
        }
    }
    let until_ns = start_when_ready(&run).await?;
    let label = nemesis.label();
    let pass = run.plan.quiet + run.plan.fault;
    tokio::time::sleep(run.plan.quiet).await;
    while now_ns() + (pass.as_nanos() as u64) <= until_ns {
        run.log(&Event::Fault(label.clone()))?;
        let injected = nemesis.inject(&run).await;
        if injected.is_ok() {
            tokio::time::sleep(run.plan.fault).await;
        }
        // Heal even after a failed injection: it may have half-happened.
        let healed = nemesis.heal(&run).await;
        run.log(&Event::Healed(label.clone()))?;
        injected.and(healed)?;
        tokio::time::sleep(run.plan.quiet).await;
    }
    finish(&run).await?;
    probe(&run).await?;
    let worker_log = std::fs::read_to_string(run.plan.dir.join("workers.log")).unwrap_or_default();
    let mut locks = Vec::new();
    for group in &run.groups {
        let value = Register::open(group.dir.join("register")).value()?;
        group.history.log(Event::Final(value))?;
        let records = History::read(group.history.path()).map_err(std::io::Error::other)?;
        if !records
            .iter()
            .any(|r| matches!(r.event, Event::Probe { .. }))
        {
            return Err(std::io::Error::other(format!(
                "the probe of the {} wrote no result; the workers' output:\n{}",
                group.lock,
                tail(&worker_log, 4000)
            )));
        }
        locks.push(LockOutcome {
            lock: group.lock,
            figures: check(&records),
            history: group.history.path().to_owned(),
        });
    }
    Ok(Outcome {
        locks,
        worker_log: tail(&worker_log, 4000),
    })
}

/// The longest a worker may take to connect.
const CONNECTING: Duration = Duration::from_secs(60);

/// Waits until every worker is connected, then starts them all with the
/// end of the run, which it returns.
async fn start_when_ready(run: &Run) -> std::io::Result<u64> {
    let deadline = tokio::time::Instant::now() + CONNECTING;
    loop {
        let mut ready = true;
        for group in &run.groups {
            let mut workers = group.workers.lock().unwrap_or_else(|p| p.into_inner());
            let pids: Vec<u32> = workers.iter().filter_map(Child::id).collect();
            let waiting = {
                let mut watch = group.watch.lock().unwrap_or_else(|p| p.into_inner());
                !watch.all_ready(&pids)
            };
            let quit = workers
                .iter_mut()
                .any(|c| !matches!(c.try_wait(), Ok(None)));
            if quit || (waiting && tokio::time::Instant::now() >= deadline) {
                let log =
                    std::fs::read_to_string(run.plan.dir.join("workers.log")).unwrap_or_default();
                return Err(std::io::Error::other(format!(
                    "the workers of the {} did not all connect{}; their output:\n{}",
                    group.lock,
                    if quit { "" } else { " within a minute" },
                    tail(&log, 4000)
                )));
            }
            ready &= !waiting;
        }
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let until_ns = now_ns() + run.plan.duration.as_nanos() as u64;
    // Written whole, then renamed: a worker never reads half of it.
    let part = run.start.with_extension("part");
    std::fs::write(&part, until_ns.to_string())?;
    std::fs::rename(&part, &run.start)?;
    Ok(until_ns)
}

/// How long a worker (or a probe) may take past its last acquire's wait.
fn grace(plan: &RunPlan) -> Duration {
    plan.wait + plan.ttl * 2 + Duration::from_secs(5)
}

/// Lets the workers finish their last round, then kills stragglers.
async fn finish(run: &Run) -> std::io::Result<()> {
    let mut workers = Vec::new();
    for group in &run.groups {
        workers.append(&mut group.workers.lock().unwrap_or_else(|p| p.into_inner()));
    }
    for child in workers {
        // A worker left paused by a failed heal would never finish.
        if let Some(pid) = child.id() {
            let _ = run.signal(pid, Signal::SIGCONT);
        }
        reap(run, child, grace(&run.plan)).await?;
    }
    Ok(())
}

/// Once every worker has stopped, takes each lock whole (see
/// [`probe`](crate::probe)), the locks side by side. A probe waits for
/// its lock at most a permit's wait per permit.
async fn probe(run: &Run) -> std::io::Result<()> {
    let probes = run
        .groups
        .iter()
        .map(|g| Ok((run.spawn(g, true)?, g.lock.whole().1)))
        .collect::<std::io::Result<Vec<_>>>()?;
    for (child, permits) in probes {
        reap(run, child, grace(&run.plan) * permits).await?;
    }
    Ok(())
}

/// Waits for `child` at most `grace`, then kills it.
async fn reap(run: &Run, mut child: Child, grace: Duration) -> std::io::Result<()> {
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        if let Some(pid) = child.id() {
            let _ = run.signal(pid, Signal::SIGKILL);
        }
        child.wait().await?;
    }
    Ok(())
}

fn tail(text: &str, max: usize) -> String {
    let start = text.len().saturating_sub(max);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_owned()
}
