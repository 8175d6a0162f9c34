//! One run: worker processes taking one lock while a nemesis strikes on a
//! schedule, then the checker's figures.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use lock_core::backend::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::checker::{Figures, check};
use crate::history::{Event, Follower, History, now_ns};
use crate::register::Register;
use crate::worker::WorkerPlan;

/// What a run does.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The lock service.
    pub url: String,
    /// The lock every worker takes.
    pub name: String,
    /// Worker processes.
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
    /// Where the history, the register and the workers' output go.
    pub dir: PathBuf,
}

impl RunPlan {
    /// A plan with the usual proportions for `ttl`: holds of up to a fifth
    /// of it, faults of twice it, and quiet times of one TTL.
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

/// No fault: the baseline.
#[derive(Debug, Default)]
pub struct Calm;

#[async_trait]
impl Nemesis for Calm {
    fn label(&self) -> String {
        "none".into()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        Ok(())
    }
}

/// SIGSTOP of a holder's whole process group for the fault's length (set
/// it past the TTL), then SIGCONT: a GC pause, a stalled VM.
#[derive(Debug, Default)]
pub struct PauseHolder {
    paused: Option<u32>,
}

#[async_trait]
impl Nemesis for PauseHolder {
    fn label(&self) -> String {
        "pause-holder".into()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        self.paused = Some(run.pause_holder().await?);
        Ok(())
    }
    async fn heal(&mut self, run: &Run) -> std::io::Result<()> {
        match self.paused.take() {
            Some(pid) => run.signal(pid, Signal::SIGCONT),
            None => Ok(()),
        }
    }
}

/// SIGKILL of a holder; a new worker takes its place, as a supervisor
/// would restart it.
#[derive(Debug, Default)]
pub struct KillHolder;

#[async_trait]
impl Nemesis for KillHolder {
    fn label(&self) -> String {
        "kill-holder".into()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        let pid = run.holder().await;
        run.replace(pid).await
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        Ok(())
    }
}

/// A run in progress, as a nemesis sees it.
#[derive(Debug)]
pub struct Run {
    plan: RunPlan,
    until_ns: u64,
    history: History,
    workers: Mutex<Vec<Child>>,
    watch: Mutex<Watch>,
}

/// What the nemeses ask of the history, kept up to date line by line as it
/// grows instead of read whole at every look.
#[derive(Debug)]
struct Watch {
    follower: Follower,
    /// Each process's last event, signals left out.
    last: HashMap<u32, Event>,
    last_grant_ns: Option<u64>,
    last_heal_ns: Option<u64>,
}

impl Watch {
    fn catch_up(&mut self) {
        // A line that cannot be read now is read at the next look.
        let Ok(records) = self.follower.new_records() else {
            return;
        };
        for r in records {
            match r.event {
                Event::AtRisk | Event::Lost => continue,
                Event::Grant { .. } => self.last_grant_ns = self.last_grant_ns.max(Some(r.ns)),
                Event::Healed(_) => self.last_heal_ns = self.last_heal_ns.max(Some(r.ns)),
                _ => {}
            }
            self.last.insert(r.pid, r.event);
        }
    }

    /// The workers (in pid order) whose last event puts them in `wanted`.
    fn in_phase(&mut self, workers: &[u32], wanted: Phase) -> Vec<u32> {
        self.catch_up();
        let mut found: Vec<u32> = workers
            .iter()
            .copied()
            .filter(|pid| match (wanted, self.last.get(pid)) {
                (Phase::Holding, Some(Event::Read { .. })) => true,
                (Phase::Holding, _) => false,
                // A grant is followed by a read, a write line by the write.
                (Phase::OutsideTheRegister, Some(Event::Grant { .. } | Event::Write { .. })) => {
                    false
                }
                (Phase::OutsideTheRegister, _) => true,
            })
            .collect();
        found.sort_unstable();
        found
    }
}

impl Run {
    /// The plan.
    pub fn plan(&self) -> &RunPlan {
        &self.plan
    }

    /// The history file.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The workers' process ids.
    pub fn workers(&self) -> Vec<u32> {
        let workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers.iter().filter_map(Child::id).collect()
    }

    /// A worker that holds the lock now, by the history (it has read the
    /// register and not yet written it: it is in its hold); if none does
    /// within a TTL, any worker.
    pub async fn holder(&self) -> u32 {
        let deadline = tokio::time::Instant::now() + self.plan.ttl;
        loop {
            let workers = self.workers();
            if let Some(pid) = self.in_phase(&workers, Phase::Holding).first() {
                return *pid;
            }
            if tokio::time::Instant::now() >= deadline {
                return workers[rand::random_range(0..workers.len())];
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Stops a holder's process group with SIGSTOP and returns its pid. The
    /// holder is caught in its hold, never inside a register call: a worker
    /// stopped with the register's `flock` would stop every other worker
    /// too. So it is stopped, then the history is read again, and if it
    /// had gone on to its write meanwhile it is continued and another
    /// chance is taken. If no holder is caught within a TTL, a worker that
    /// is not in a register call is stopped instead.
    pub async fn pause_holder(&self) -> std::io::Result<u32> {
        let deadline = tokio::time::Instant::now() + self.plan.ttl;
        loop {
            let wanted = if tokio::time::Instant::now() < deadline {
                Phase::Holding
            } else {
                Phase::OutsideTheRegister
            };
            let workers = self.workers();
            for pid in self.in_phase(&workers, wanted) {
                self.signal(pid, Signal::SIGSTOP)?;
                if self.in_phase(&[pid], wanted) == [pid] {
                    return Ok(pid);
                }
                self.signal(pid, Signal::SIGCONT)?;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Whether a worker was granted the lock after the last fault ended
    /// (or no fault has ended yet).
    pub fn granted_since_heal(&self) -> bool {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        watch.catch_up();
        match (watch.last_heal_ns, watch.last_grant_ns) {
            (None, _) => true,
            (Some(heal), grant) => grant.is_some_and(|g| g > heal),
        }
    }

    fn in_phase(&self, workers: &[u32], wanted: Phase) -> Vec<u32> {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        watch.in_phase(workers, wanted)
    }

    /// Sends `signal` to a worker's process group.
    pub fn signal(&self, pid: u32, signal: Signal) -> std::io::Result<()> {
        killpg(Pid::from_raw(pid as i32), signal).map_err(std::io::Error::from)
    }

    /// Kills a worker with SIGKILL and starts another in its place.
    pub async fn replace(&self, pid: u32) -> std::io::Result<()> {
        let old = {
            let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
            let at = workers.iter().position(|c| c.id() == Some(pid));
            at.map(|at| workers.swap_remove(at))
        };
        if let Some(mut old) = old {
            self.signal(pid, Signal::SIGKILL)?;
            old.wait().await?;
        }
        let fresh = self.spawn()?;
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(fresh);
        Ok(())
    }

    fn spawn(&self) -> std::io::Result<Child> {
        let plan = WorkerPlan {
            url: self.plan.url.clone(),
            name: self.plan.name.clone(),
            ttl: self.plan.ttl,
            hold: self.plan.hold,
            wait: self.plan.wait,
            until_ns: self.until_ns,
            history: self.history.path().to_owned(),
            register: self.plan.dir.join("register"),
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

/// Where a worker is in its loop, by its last event.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between its read of the register and its write.
    Holding,
    /// Not between announcing a register call and finishing it.
    OutsideTheRegister,
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    /// The checker's figures.
    pub figures: Figures,
    /// The history file.
    pub history: PathBuf,
    /// The tail of the workers' output, for failure messages.
    pub worker_log: String,
}

/// Starts the workers, applies `nemesis` on the plan's schedule until the
/// duration is over, waits for the workers, and checks the history.
pub async fn run(plan: RunPlan, nemesis: &mut dyn Nemesis) -> std::io::Result<Outcome> {
    std::fs::create_dir_all(&plan.dir)?;
    let path = plan.dir.join("history");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(plan.dir.join("register"));
    let history = History::open(&path)?;
    let started = now_ns();
    let until_ns = started + plan.duration.as_nanos() as u64;
    let run = Run {
        plan,
        until_ns,
        history,
        workers: Mutex::new(Vec::new()),
        watch: Mutex::new(Watch {
            follower: Follower::new(path),
            last: HashMap::new(),
            last_grant_ns: None,
            last_heal_ns: None,
        }),
    };
    for _ in 0..run.plan.clients {
        let child = run.spawn()?;
        run.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(child);
    }
    let label = nemesis.label();
    let pass = run.plan.quiet + run.plan.fault;
    tokio::time::sleep(run.plan.quiet).await;
    while now_ns() + (pass.as_nanos() as u64) <= until_ns {
        run.history.log(Event::Fault(label.clone()))?;
        let injected = nemesis.inject(&run).await;
        if injected.is_ok() {
            tokio::time::sleep(run.plan.fault).await;
        }
        // Heal even after a failed injection: it may have half-happened.
        let healed = nemesis.heal(&run).await;
        run.history.log(Event::Healed(label.clone()))?;
        injected.and(healed)?;
        tokio::time::sleep(run.plan.quiet).await;
    }
    finish(&run).await?;
    let value = Register::open(run.plan.dir.join("register")).value()?;
    run.history.log(Event::Final(value))?;
    let records =
        History::read(run.history.path()).map_err(|e| std::io::Error::other(e.to_string()))?;
    let worker_log = std::fs::read_to_string(run.plan.dir.join("workers.log")).unwrap_or_default();
    Ok(Outcome {
        figures: check(&records),
        history: run.history.path().to_owned(),
        worker_log: tail(&worker_log, 4000),
    })
}

/// Lets the workers finish their last round, then kills stragglers.
async fn finish(run: &Run) -> std::io::Result<()> {
    let workers = std::mem::take(&mut *run.workers.lock().unwrap_or_else(|p| p.into_inner()));
    let grace = run.plan.wait + run.plan.ttl * 2 + Duration::from_secs(5);
    for mut child in workers {
        // A worker left paused by a failed heal would never finish.
        if let Some(pid) = child.id() {
            let _ = run.signal(pid, Signal::SIGCONT);
        }
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            if let Some(pid) = child.id() {
                let _ = run.signal(pid, Signal::SIGKILL);
            }
            child.wait().await?;
        }
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
