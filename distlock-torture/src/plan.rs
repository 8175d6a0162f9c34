//! What one worker process does, as the run writes it on the process's
//! command line and the worker (or the probe) reads it back.

use std::path::PathBuf;
use std::time::Duration;

use crate::lock::Lock;

/// What a worker does, passed to its process as `key=value` arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerPlan {
    /// The lock service.
    pub url: String,
    /// The name every worker takes.
    pub name: String,
    /// Which lock of that name.
    pub lock: Lock,
    /// Whether this process is the run's last step, the probe (see
    /// `probe.rs`), instead of a worker.
    pub probe: bool,
    /// The lease each acquire asks for.
    pub ttl: Duration,
    /// The longest hold; each hold is uniformly random up to it.
    pub hold: Duration,
    /// How long one acquire waits before it fails.
    pub wait: Duration,
    /// The file the run writes, once every worker is connected, with when
    /// to stop taking the lock (on `CLOCK_MONOTONIC`): a worker starts when
    /// it appears, so that slow connections (a database's schema set up by
    /// each client) do not eat into the run.
    pub start: PathBuf,
    /// The history file.
    pub history: PathBuf,
    /// The register file.
    pub register: PathBuf,
}

impl WorkerPlan {
    /// The plan as command-line arguments.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            format!("url={}", self.url),
            format!("name={}", self.name),
            format!("lock={}", self.lock.to_arg()),
            format!("probe={}", self.probe),
            format!("ttl-ms={}", self.ttl.as_millis()),
            format!("hold-ms={}", self.hold.as_millis()),
            format!("wait-ms={}", self.wait.as_millis()),
            format!("start={}", self.start.display()),
            format!("history={}", self.history.display()),
            format!("register={}", self.register.display()),
        ]
    }

    /// The plan from [`to_args`](Self::to_args)'s arguments.
    pub fn from_args(args: &[String]) -> Result<Self, String> {
        let get = |key: &str| -> Result<&str, String> {
            args.iter()
                .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
                .ok_or_else(|| format!("worker: missing {key}=…"))
        };
        let millis = |key: &str| -> Result<Duration, String> {
            get(key)?
                .parse()
                .map(Duration::from_millis)
                .map_err(|e| format!("worker: {key}: {e}"))
        };
        Ok(Self {
            url: get("url")?.to_owned(),
            name: get("name")?.to_owned(),
            lock: Lock::from_arg(get("lock")?).map_err(|e| format!("worker: lock: {e}"))?,
            probe: get("probe")?
                .parse()
                .map_err(|e| format!("worker: probe: {e}"))?,
            ttl: millis("ttl-ms")?,
            hold: millis("hold-ms")?,
            wait: millis("wait-ms")?,
            start: get("start")?.into(),
            history: get("history")?.into(),
            register: get("register")?.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_survives_its_arguments() {
        let plan = WorkerPlan {
            url: "redis://127.0.0.1:1/?prefix=a=b".into(),
            name: "torture".into(),
            lock: Lock::Semaphore { permits: 2 },
            probe: true,
            ttl: Duration::from_millis(500),
            hold: Duration::from_millis(100),
            wait: Duration::from_secs(2),
            start: "/tmp/s".into(),
            history: "/tmp/h".into(),
            register: "/tmp/r".into(),
        };
        assert_eq!(WorkerPlan::from_args(&plan.to_args()), Ok(plan));
    }
}
