//! Jepsen-shaped fault testing for distlock backends.
//!
//! Worker processes take one lock over and over, read a [fenced
//! register](register) with their fencing token, hold for a moment, and
//! write it back; every step goes into one [history] stamped with
//! `CLOCK_MONOTONIC`. A nemesis pauses or kills holders (and, in the
//! project's tests, servers and networks) meanwhile. The [checker] reads
//! the history and counts what broke: overlapping critical sections while
//! both leases were valid, stale writes the fence let through, tokens out
//! of order, lost writes, and how long the lock took to come back.

#![forbid(unsafe_code)]

pub mod checker;
pub mod history;
pub mod register;
pub mod report;
pub mod run;
pub mod worker;

pub use checker::{Figures, check};
pub use run::{Calm, KillHolder, Nemesis, Outcome, PauseHolder, Run, RunPlan, run};
pub use worker::{WorkerPlan, work};
