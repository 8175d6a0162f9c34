//! Jepsen-shaped fault testing for distlock backends.
//!
//! Worker processes take a [lock](lock) — the mutex, a semaphore or a
//! read-write lock — over and over; holders that exclude others read a
//! [fenced register](register) with their fencing token, hold for a
//! moment, and write it back (readers only read, a semaphore's holders
//! only hold); every step goes into one [history] per lock stamped with
//! `CLOCK_MONOTONIC`. A nemesis pauses or kills holders (and, in the
//! project's tests, servers and networks) meanwhile, and at the end a
//! [probe] takes the whole lock. The [checker] reads each history and
//! counts what broke: holders beside each other against the lock's rule
//! while their leases were valid, stale writes the fence let through,
//! tokens out of order, lost writes, permits that never came back, and how
//! long the lock took to come back.

#![forbid(unsafe_code)]

pub mod checker;
pub mod history;
pub mod lock;
pub mod nemesis;
pub mod plan;
pub mod probe;
pub mod register;
pub mod report;
pub mod run;
mod watch;
pub mod worker;

pub use checker::{Figures, check};
pub use lock::Lock;
pub use nemesis::{Calm, KillHolder, PauseHolder};
pub use plan::WorkerPlan;
pub use run::{LockOutcome, Nemesis, Outcome, Run, RunPlan, run};
pub use worker::work;
