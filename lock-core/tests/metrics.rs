//! The `metrics` feature: what lockers report, read back from
//! metrics-util's debugging recorder.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Lease, LockBackend, async_trait};
use lock_core::{
    AcquireOptions, Capabilities, Error, LockState, Locker, MemoryBackend, Result, Wait,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// The memory backend, whose renewals fail while `failing` is set.
#[derive(Debug, Clone, Default)]
struct Failing {
    inner: MemoryBackend,
    failing: Arc<AtomicBool>,
}

#[async_trait]
impl LockBackend for Failing {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        self.inner.try_acquire(req).await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Error::unavailable("failing", "connection refused"));
        }
        self.inner.renew(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.inner.abandon(req).await
    }
}

/// Every metric recorded while `body` ran on a paused clock, as
/// `(name, labels, value)`.
fn recorded<F: Future<Output = ()>>(body: impl FnOnce() -> F) -> Vec<Metric> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(body())
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            Metric {
                name: key.name().to_owned(),
                labels,
                value,
            }
        })
        .collect()
}

struct Metric {
    name: String,
    labels: Vec<(String, String)>,
    value: DebugValue,
}

fn find<'a>(metrics: &'a [Metric], name: &str, labels: &[(&str, &str)]) -> Option<&'a Metric> {
    let mut wanted: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    wanted.sort();
    metrics
        .iter()
        .find(|m| m.name == name && m.labels == wanted)
}

fn counter(metrics: &[Metric], name: &str, labels: &[(&str, &str)]) -> u64 {
    match find(metrics, name, labels).map(|m| &m.value) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        Some(other) => panic!("{name} is not a counter: {other:?}"),
    }
}

fn samples(metrics: &[Metric], name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    match find(metrics, name, labels).map(|m| &m.value) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
        None => Vec::new(),
        Some(other) => panic!("{name} is not a histogram: {other:?}"),
    }
}

const MEMORY: (&str, &str) = ("backend", "memory");

#[test]
fn acquires_are_counted_by_outcome_and_timed() {
    let metrics = recorded(|| async {
        let locker = Locker::new(MemoryBackend::new());
        let held = locker.lock("a").await.unwrap();
        assert!(locker.try_lock("a").await.unwrap_err().is_busy());
        let other = locker.clone();
        let waited = tokio::spawn(async move {
            other
                .lock_with(
                    "a",
                    AcquireOptions::default().wait(Wait::For(Duration::from_millis(50))),
                )
                .await
                .map(|_| ())
        });
        assert!(matches!(
            waited.await.unwrap(),
            Err(Error::WaitTimeout { .. })
        ));
        tokio::time::sleep(Duration::from_millis(20)).await;
        held.release().await.unwrap();
    });
    assert_eq!(counter(&metrics, "distlock_grants_total", &[MEMORY]), 1);
    assert_eq!(counter(&metrics, "distlock_busy_total", &[MEMORY]), 1);
    assert_eq!(
        counter(&metrics, "distlock_wait_timeouts_total", &[MEMORY]),
        1
    );
    assert_eq!(
        counter(&metrics, "distlock_releases_not_held_total", &[MEMORY]),
        0
    );
    let granted = samples(
        &metrics,
        "distlock_acquire_seconds",
        &[MEMORY, ("outcome", "granted")],
    );
    assert_eq!(granted.len(), 1);
    let timed_out = samples(
        &metrics,
        "distlock_acquire_seconds",
        &[MEMORY, ("outcome", "wait_timeout")],
    );
    assert_eq!(timed_out.len(), 1);
    assert!(timed_out[0] >= 0.05, "the wait's length: {timed_out:?}");
    // Only the acquire that waited counts as a wait.
    let waits = samples(&metrics, "distlock_wait_seconds", &[MEMORY]);
    assert_eq!(waits.len(), 1);
    assert!(waits[0] >= 0.05);
    let held = samples(&metrics, "distlock_held_seconds", &[MEMORY]);
    assert_eq!(held.len(), 1);
    assert!(
        held[0] >= 0.07,
        "held through the wait and the nap: {held:?}"
    );
}

#[test]
fn failing_renewals_at_risk_and_lost_are_counted() {
    let metrics = recorded(|| async {
        let backend = Failing::default();
        let locker = Locker::new(backend.clone());
        let guard = locker
            .lock_with("a", AcquireOptions::with_ttl(Duration::from_millis(300)))
            .await
            .unwrap();
        backend.failing.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(guard.state(), LockState::Lost);
        assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    });
    assert!(counter(&metrics, "distlock_renew_failures_total", &[MEMORY]) >= 2);
    assert_eq!(counter(&metrics, "distlock_at_risk_total", &[MEMORY]), 1);
    assert_eq!(counter(&metrics, "distlock_lost_total", &[MEMORY]), 1);
    assert_eq!(
        counter(&metrics, "distlock_releases_not_held_total", &[MEMORY]),
        1
    );
}

#[test]
fn the_lock_name_is_a_label_only_when_asked_for() {
    let metrics = recorded(|| async {
        let plain = Locker::new(MemoryBackend::new());
        plain.lock("a").await.unwrap().release().await.unwrap();
        let named = Locker::new(MemoryBackend::new()).label_metrics_by_name(true);
        named.lock("b").await.unwrap().release().await.unwrap();
    });
    assert_eq!(counter(&metrics, "distlock_grants_total", &[MEMORY]), 1);
    assert_eq!(
        counter(&metrics, "distlock_grants_total", &[MEMORY, ("lock", "b")]),
        1
    );
    assert!(
        metrics
            .iter()
            .all(|m| !m.labels.iter().any(|(k, v)| k == "lock" && v == "a")),
        "no series names lock a"
    );
}
