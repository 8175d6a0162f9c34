//! One worker process: takes its lock over and over, holds a moment, and
//! releases, logging every step. A holder of the mutex or a read-write
//! lock's writer reads the register with its token, holds, and writes the
//! value plus one back; a reader reads it and holds; a semaphore's holder
//! only holds (see [`Lock::fenced`](crate::lock::Lock::fenced)). A writer writes whether or not its
//! lease is still valid — as a process waking from a pause would, which
//! is what the fence is for.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use lock_core::backend::acquire_kind;
use lock_core::{AcquireOptions, LockGuard, LockKind, LockState, Locker, StateWatch, Wait};
use rand::Rng;

use crate::history::{Event, History, error_kind, instant_ns, now_ns};
use crate::plan::WorkerPlan;
use crate::register::{Register, Side, Verdict};

/// Runs the worker's loop from when the run's start file appears until the
/// end time it holds (or, for a probe's plan, the probe). Lock errors are
/// logged and the loop goes on; only a history or register that cannot be
/// written ends it.
pub async fn work(locker: &Locker, plan: &WorkerPlan) -> std::io::Result<()> {
    if plan.probe {
        return crate::probe::probe(locker, plan).await;
    }
    let history = History::open(&plan.history)?;
    let register = Register::open(&plan.register);
    let opts = AcquireOptions::with_ttl(plan.ttl).wait(Wait::For(plan.wait));
    history.log(Event::Ready)?;
    let until_ns = started(&plan.start).await?;
    while now_ns() < until_ns {
        let kind = plan.lock.next_kind(&mut rand::rng());
        history.log(Event::Invoke)?;
        let guard = match acquire_kind(locker, &plan.name, kind, opts).await {
            Ok(guard) => guard,
            Err(e) => {
                history.log(Event::Fail(error_kind(&e).to_owned()))?;
                // Not a busy loop while the service is down.
                tokio::time::sleep(plan.ttl / 10).await;
                continue;
            }
        };
        let token = guard.token().get();
        history.log(Event::Grant {
            token,
            deadline_ns: instant_ns(guard.lease().deadline().into()),
            kind,
        })?;
        let signals = Signals::new(history.clone());
        let watching = tokio::spawn(signals.clone().follow(guard.handle().watch()));
        hold(&history, &register, &guard, &signals, plan.hold).await?;
        history.log(Event::Release {
            deadline_ns: instant_ns(guard.lease().deadline().into()),
        })?;
        signals.note(guard.state());
        let released = guard.release().await;
        watching.abort();
        history.log(match released {
            Ok(()) => Event::Released,
            Err(e) => Event::ReleaseFailed(error_kind(&e).to_owned()),
        })?;
    }
    Ok(())
}

/// Waits for the run's start file and returns the end time it holds.
async fn started(start: &Path) -> std::io::Result<u64> {
    loop {
        match std::fs::read_to_string(start) {
            Ok(text) => return text.trim().parse().map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// One critical section, by the grant's kind: a semaphore's holder only
/// holds; a reader reads the register and holds; an exclusive holder reads,
/// holds and writes the value plus one.
async fn hold(
    history: &History,
    register: &Register,
    guard: &LockGuard,
    signals: &Signals,
    longest: Duration,
) -> std::io::Result<()> {
    let token = guard.token().get();
    let side = match guard.kind() {
        LockKind::Read => Side::Shared,
        LockKind::Exclusive | LockKind::Write | LockKind::Leader => Side::Exclusive,
        _ => {
            sleep_up_to(longest).await;
            return Ok(());
        }
    };
    let value = match register.read(token, side)? {
        Verdict::Served(value) => value,
        Verdict::Stale => return history.log(Event::ReadRejected(token)),
    };
    history.log(Event::Read { token, value })?;
    sleep_up_to(longest).await;
    if side == Side::Shared {
        return Ok(());
    }
    // A holder that slept through its lease learns it here at the latest,
    // as `state()` reads the deadline.
    signals.note(guard.state());
    history.log(Event::Write {
        token,
        value: value + 1,
    })?;
    history.log(match register.write(token, value + 1)? {
        Verdict::Served(()) => Event::Accepted,
        Verdict::Stale => Event::Rejected,
    })
}

async fn sleep_up_to(longest: Duration) {
    let hold = rand::rng().random_range(Duration::ZERO..=longest);
    tokio::time::sleep(hold).await;
}

/// Logs each step of a guard's lost signal once, whether the watch or the
/// worker's own look at the state sees it first.
#[derive(Clone)]
struct Signals {
    logged: Arc<AtomicU8>,
    history: History,
}

impl Signals {
    fn new(history: History) -> Self {
        Self {
            logged: Arc::new(AtomicU8::new(LockState::Held as u8)),
            history,
        }
    }

    fn note(&self, state: LockState) {
        let event = match state {
            LockState::Held => return,
            LockState::AtRisk => Event::AtRisk,
            _ => Event::Lost,
        };
        if self.logged.fetch_max(state as u8, Ordering::SeqCst) < state as u8 {
            let _ = self.history.log(event);
        }
    }

    async fn follow(self, mut states: StateWatch) {
        self.note(states.state());
        while let Some(now) = states.changed().await {
            self.note(now);
        }
    }
}
