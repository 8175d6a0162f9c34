//! The client faults every backend is measured under: none, a holder
//! paused, a holder killed (the `Nemesis` trait they implement is the
//! run's, in `run.rs`).

use lock_core::backend::async_trait;
use nix::sys::signal::Signal;

use crate::run::{Nemesis, Run};

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

/// SIGSTOP of a holder of each of the run's locks (its whole process
/// group) for the fault's length (set it past the TTL), then SIGCONT: a
/// GC pause, a stalled VM.
#[derive(Debug, Default)]
pub struct PauseHolder {
    paused: Vec<u32>,
}

#[async_trait]
impl Nemesis for PauseHolder {
    fn label(&self) -> String {
        "pause-holder".into()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        self.paused = run.pause_holders().await?;
        Ok(())
    }
    async fn heal(&mut self, run: &Run) -> std::io::Result<()> {
        for pid in std::mem::take(&mut self.paused) {
            run.signal(pid, Signal::SIGCONT)?;
        }
        Ok(())
    }
}

/// SIGKILL of a holder of each of the run's locks; a new worker takes each
/// one's place, as a supervisor would restart it.
#[derive(Debug, Default)]
pub struct KillHolder;

#[async_trait]
impl Nemesis for KillHolder {
    fn label(&self) -> String {
        "kill-holder".into()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        for lock in run.locks() {
            let pid = run.holder_of(lock).await;
            run.replace(pid).await?;
        }
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        Ok(())
    }
}
