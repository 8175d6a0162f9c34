//! One backend under measurement: its library, floor and peers, and what
//! they measured so far. Several targets take turns round by round, so a run
//! over several URLs interleaves them the way one target interleaves its
//! contenders.

use std::sync::Arc;
use std::time::Duration;

use distlock::Result;

use super::contender::{Contender, Library, Subject};
use super::counting::Counting;
use super::report::{Machine, Report, Settings, WorkloadReport};
use super::workload::{DYING_TTL, HOLD, Plan, Run, Slice, Workload, failovers};
use super::{floor, metrics, peer};

pub(crate) struct Target {
    url: String,
    backend: &'static str,
    ttl: Duration,
    library: Arc<dyn Contender>,
    /// The library as the wake-ups workload measures it (see `Counting`).
    counted: Arc<dyn Contender>,
    floor: Arc<dyn Contender>,
    /// Other crates' locks.
    peers: Vec<Arc<dyn Contender>>,
    /// Other crates' elections: the election workload's peers, instead of
    /// `peers`.
    candidates: Vec<Arc<dyn Contender>>,
    /// Floor, library, peers: the order contenders take turns in.
    contenders: Vec<Arc<dyn Contender>>,
    /// The contenders of the workload under way: all of them, but for the
    /// semaphore workload (floor and library: peers keep no semaphores)
    /// and the election workload (floor, library and `candidates`).
    active: Vec<Arc<dyn Contender>>,
    /// Whether the backend keeps semaphores (else the semaphore workload
    /// is skipped).
    semaphores: bool,
    /// Whether it keeps read-write locks (else the read-write workload is
    /// skipped).
    read_write: bool,
    /// Whether it keeps elections (else the election workload is skipped).
    elections: bool,
    /// The lease of the election workload's dying leaders.
    dying_ttl: Duration,
    workloads: Vec<WorkloadReport>,
    /// The workload under way: each contender's slices merged so far, and
    /// each one's per-slice summaries, round by round, for the paired ratios.
    totals: Vec<Slice>,
    slices: Vec<Vec<Run>>,
}

impl Target {
    pub(crate) async fn open(url: &str) -> Result<Self> {
        let locker = distlock::connect(url).await?;
        let backend = locker.capabilities().backend;
        let semaphores = locker.capabilities().semaphores;
        let elections = locker.capabilities().elections;
        let read_write = locker.capabilities().read_write;
        let dying_ttl = DYING_TTL.max(locker.capabilities().min_ttl);
        let ttl = locker.defaults().ttl;
        let (library, counted): (Arc<dyn Contender>, Arc<dyn Contender>) = if Counting::fits(url) {
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
        let floor = floor::connect(backend, url, ttl).await?;
        let peers = peer::for_backend(url, ttl).await?;
        let candidates = peer::candidates_for_backend(url, ttl).await?;
        let mut contenders = vec![floor.clone(), library.clone()];
        contenders.extend(peers.iter().cloned());
        Ok(Self {
            url: url.to_owned(),
            backend,
            ttl,
            library,
            counted,
            floor,
            peers,
            candidates,
            active: contenders.clone(),
            contenders,
            semaphores,
            read_write,
            elections,
            dying_ttl,
            workloads: Vec::new(),
            totals: Vec::new(),
            slices: Vec::new(),
        })
    }

    /// The backend, as its capabilities name it.
    pub(crate) fn backend(&self) -> &'static str {
        self.backend
    }

    /// The URL, with any password removed.
    pub(crate) fn url(&self) -> String {
        distlock::url::redact(&self.url)
    }

    /// Library first, then the floor, then any peers, then any election
    /// peers.
    pub(crate) fn subjects(&self) -> Vec<Subject> {
        [&self.library, &self.floor]
            .into_iter()
            .chain(&self.peers)
            .chain(&self.candidates)
            .map(|c| c.subject())
            .collect()
    }

    /// How many contenders take turns in a workload at most (the plan
    /// divides the time by it).
    pub(crate) fn contenders(&self) -> usize {
        2 + self.peers.len().max(self.candidates.len())
    }

    /// Whether this target runs `workload` (the semaphore and election
    /// workloads only where the backend keeps semaphores or elections).
    pub(crate) fn runs(&self, workload: Workload) -> bool {
        match workload {
            Workload::Semaphore => self.semaphores,
            Workload::ReadWrite => self.read_write,
            Workload::Election => self.elections,
            _ => true,
        }
    }

    /// Gets ready to measure `workload`.
    pub(crate) fn begin(&mut self, workload: Workload, plan: &Plan) {
        self.active = self.contenders.clone();
        // The counting wrapper costs a little per call, so only the workload
        // that needs its counts pays for it.
        match workload {
            Workload::Wakeups => self.active[1] = self.counted.clone(),
            Workload::Semaphore | Workload::ReadWrite => self.active.truncate(2),
            Workload::Election => {
                self.active.truncate(2);
                self.active.extend(self.candidates.iter().cloned());
            }
            _ => {}
        }
        self.totals = self.active.iter().map(|_| Slice::default()).collect();
        self.slices = self
            .active
            .iter()
            .map(|_| Vec::with_capacity(plan.slices as usize))
            .collect();
    }

    /// Every contender's slice of round `round`.
    pub(crate) async fn round(
        &mut self,
        workload: Workload,
        plan: &Plan,
        round: usize,
    ) -> Result<()> {
        // Each round starts with the next contender, so none always follows
        // the same one.
        let n = self.active.len();
        for k in 0..n {
            let i = (round + k) % n;
            let contender = &self.active[i];
            let slice = workload.slice(contender, plan).await?;
            self.slices[i].push(slice.summary(&contender.subject().name));
            self.totals[i].merge(slice);
        }
        Ok(())
    }

    /// After the rounds of the election workload, its failover part, one
    /// contender after the other (see [`failovers`]).
    pub(crate) async fn failovers(&mut self, workload: Workload, plan: &Plan) -> Result<()> {
        if workload != Workload::Election {
            return Ok(());
        }
        for (contender, total) in self.active.iter().zip(&mut self.totals) {
            if let Some(dying) = failovers(contender, plan, self.dying_ttl).await? {
                total.merge(dying);
            }
        }
        Ok(())
    }

    /// Ends `workload`: each contender's run of it and the metrics.
    pub(crate) fn finish(&mut self, workload: Workload, plan: &Plan) -> WorkloadReport {
        let runs: Vec<Run> = std::mem::take(&mut self.totals)
            .into_iter()
            .zip(&self.active)
            .map(|(total, c)| total.into_run(c.subject().name))
            .collect();
        let slices = std::mem::take(&mut self.slices);
        WorkloadReport {
            workload,
            describe: workload.describe(plan),
            latency: workload.latency(),
            metrics: metrics::metrics(workload, &runs, &slices, &self.floor.subject().name),
            runs,
        }
    }

    /// Keeps a finished workload for [`Target::report`].
    pub(crate) fn keep(&mut self, measured: WorkloadReport) {
        self.workloads.push(measured);
    }

    /// Everything this target measured.
    pub(crate) fn report(self, plan: &Plan, date: String, machine: Machine) -> Report {
        Report {
            backend: self.backend,
            url: self.url(),
            date,
            machine,
            settings: Settings::of(plan, self.ttl),
            subjects: self.subjects(),
            hand_off_in_floor_commands: metrics::hand_off_in_commands(
                &self.workloads,
                &self.floor.subject().name,
            ),
            workloads: self.workloads,
        }
    }
}

impl Settings {
    fn of(plan: &Plan, ttl: Duration) -> Self {
        Self {
            clients: plan.clients,
            names: plan.names,
            duration_ms: plan.duration.as_secs_f64() * 1e3,
            share_ms: plan.share().as_secs_f64() * 1e3,
            slices: plan.slices,
            hold_ms: HOLD.as_secs_f64() * 1e3,
            ttl_ms: ttl.as_secs_f64() * 1e3,
        }
    }
}
