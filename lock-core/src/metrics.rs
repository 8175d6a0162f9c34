//! What the generic layer reports through the [`metrics`] facade, with the
//! `metrics` feature; without it every function here is empty. The names
//! and labels are documented in the workspace README ("Metrics").
//!
//! Every metric has a `backend` label; the lock name is a label only when
//! the locker was asked for it ([`Locker::label_metrics_by_name`]), since
//! names may be unbounded and each label value is a series of its own.
//!
//! [`Locker::label_metrics_by_name`]: crate::Locker::label_metrics_by_name

use std::time::Duration;

use crate::error::Error;
use crate::name::LockName;

/// How an acquire ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Granted,
    /// Held by another owner, and the caller did not wait.
    Busy,
    WaitTimeout,
    /// Invalid input, an unreachable backend, a self-deadlock …
    Failed,
}

impl Outcome {
    pub(crate) fn of<T>(result: &Result<T, Error>) -> Self {
        match result {
            Ok(_) => Outcome::Granted,
            Err(Error::Busy { .. }) => Outcome::Busy,
            Err(Error::WaitTimeout { .. }) => Outcome::WaitTimeout,
            Err(_) => Outcome::Failed,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::Busy => "busy",
            Outcome::WaitTimeout => "wait_timeout",
            Outcome::Failed => "error",
        }
    }
}

/// The labels of one lock's metrics.
#[derive(Clone, Debug)]
pub(crate) struct Labels {
    #[cfg(feature = "metrics")]
    backend: &'static str,
    #[cfg(feature = "metrics")]
    name: Option<LockName>,
}

impl Labels {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(backend: &'static str, name: &LockName, by_name: bool) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            backend,
            #[cfg(feature = "metrics")]
            name: by_name.then(|| name.clone()),
        }
    }
}

#[cfg(feature = "metrics")]
mod report {
    use super::*;
    use metrics::{Label, counter, histogram};

    impl Labels {
        fn pairs(&self) -> Vec<Label> {
            let mut pairs = vec![Label::new("backend", self.backend)];
            if let Some(name) = &self.name {
                pairs.push(Label::new("lock", name.to_string()));
            }
            pairs
        }
    }

    pub(crate) fn acquired(labels: &Labels, outcome: Outcome, took: Duration, waited: bool) {
        let mut pairs = labels.pairs();
        if waited {
            histogram!("distlock_wait_seconds", pairs.clone()).record(took.as_secs_f64());
        }
        let counted = match outcome {
            Outcome::Granted => "distlock_grants_total",
            Outcome::Busy => "distlock_busy_total",
            Outcome::WaitTimeout => "distlock_wait_timeouts_total",
            Outcome::Failed => "distlock_acquire_errors_total",
        };
        counter!(counted, pairs.clone()).increment(1);
        pairs.push(Label::new("outcome", outcome.as_str()));
        histogram!("distlock_acquire_seconds", pairs).record(took.as_secs_f64());
    }

    pub(crate) fn released(labels: &Labels, held_for: Duration, found_gone: bool) {
        let pairs = labels.pairs();
        if found_gone {
            counter!("distlock_releases_not_held_total", pairs.clone()).increment(1);
        }
        histogram!("distlock_held_seconds", pairs).record(held_for.as_secs_f64());
    }

    pub(crate) fn renew_failed(labels: &Labels) {
        counter!("distlock_renew_failures_total", labels.pairs()).increment(1);
    }

    pub(crate) fn at_risk(labels: &Labels) {
        counter!("distlock_at_risk_total", labels.pairs()).increment(1);
    }

    pub(crate) fn lost(labels: &Labels) {
        counter!("distlock_lost_total", labels.pairs()).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod report {
    use super::*;

    pub(crate) fn acquired(_: &Labels, _: Outcome, _: Duration, _: bool) {}
    pub(crate) fn released(_: &Labels, _: Duration, _: bool) {}
    pub(crate) fn renew_failed(_: &Labels) {}
    pub(crate) fn at_risk(_: &Labels) {}
    pub(crate) fn lost(_: &Labels) {}
}

pub(crate) use report::{acquired, at_risk, lost, released, renew_failed};
