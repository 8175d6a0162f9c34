//! The workloads run against the in-memory backend.
use super::*;
use crate::cli::bench::contender::Library;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_both_get_in_and_are_told_apart() {
    let c: Arc<dyn Contender> = Arc::new(Library::new(distlock::Locker::new(
        distlock::MemoryBackend::new(),
    )));
    let plan = Plan::new(
        8,
        1,
        Duration::from_millis(200),
        1,
        Duration::from_millis(100),
    );
    assert_eq!(plan.writers(), 2);
    let mut total = Slice::default();
    for _ in 0..plan.slices {
        total.merge(Workload::ReadWrite.slice(&c, &plan).await.unwrap());
    }
    let run = total.into_run("library".to_owned());
    let writes = run.writes.expect("writes are counted");
    // A waiting writer goes first, so writers always get in; readers may
    // not, while two writers take turns.
    assert!(writes > 0, "{run:?}");
    assert_eq!(
        run.per_client[..2].iter().sum::<u64>(),
        writes,
        "clients 0 and 1 write, the others read: {run:?}"
    );
    let reads = run.latency.as_ref().map_or(0, |d| d.samples);
    let written = run.write_wait.as_ref().expect("writers' waits").samples;
    assert_eq!(reads + written, run.acquisitions);
    assert_eq!(written, writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_hand_over_on_resign_and_after_dying() {
    let c: Arc<dyn Contender> = Arc::new(Library::new(distlock::Locker::new(
        distlock::MemoryBackend::new(),
    )));
    let plan = Plan::new(
        3,
        1,
        Duration::from_millis(300),
        1,
        Duration::from_millis(100),
    );
    let mut total = Slice::default();
    for _ in 0..plan.slices {
        total.merge(Workload::Election.slice(&c, &plan).await.unwrap());
    }
    let ttl = Duration::from_millis(100);
    total.merge(failovers(&c, &plan, ttl).await.unwrap().unwrap());
    let run = total.into_run("library".to_owned());
    let resign = run.latency.expect("leaders resigned to waiting candidates");
    assert!(resign.samples >= 1, "{resign:?}");
    let failover = run.failover.expect("standbys took over");
    assert_eq!(failover.samples, FAILOVERS as u64);
    // No standby led before the dead leader's lease ran out.
    assert!(failover.p50_us >= 100_000.0 * 0.999, "{failover:?}");
    assert_eq!(run.failover_ttl_ms, Some(100.0));
}
