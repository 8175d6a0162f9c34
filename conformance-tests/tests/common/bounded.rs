//! What the tests of calls bounded by their timeout use: time a call, run
//! many at once, and assert that the slowest failed within a bound.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A call, timed: how long it took, and what it returned.
pub(crate) type Timed<T> = JoinHandle<(Duration, lock_core::Result<T>)>;

/// Runs `call` and returns how long it took, with what it returned.
pub(crate) async fn timed<T>(call: impl Future<Output = T>) -> (Duration, T) {
    let started = Instant::now();
    let out = call.await;
    (started.elapsed(), out)
}

/// Starts `n` calls at once, each timed in a task of its own; `call` gets
/// the call's number.
pub(crate) fn at_once<T, F, Fut>(n: usize, call: F) -> Vec<Timed<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = lock_core::Result<T>> + Send + 'static,
{
    (0..n)
        .map(|i| {
            let call = call(i);
            tokio::spawn(timed(call))
        })
        .collect()
}

/// Awaits every call, each of which must fail, and asserts that the
/// slowest took less than `bound`; returns the slowest's time.
pub(crate) async fn all_fail_within<T: std::fmt::Debug>(
    what: &str,
    calls: Vec<Timed<T>>,
    bound: Duration,
) -> Duration {
    let mut took = Vec::new();
    for call in calls {
        let (elapsed, outcome) = call.await.expect("no panic");
        assert!(outcome.is_err(), "{what} through a black hole: {outcome:?}");
        took.push(elapsed);
    }
    let slowest = took.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < bound,
        "{what}: the slowest took {slowest:?}; the bound is {bound:?}; each took {took:?}"
    );
    slowest
}

/// Retries `call` until it succeeds, for up to 20 s: with timeouts this
/// short, setting up (connecting, taking the locks a test holds) may time
/// out on a loaded machine, and so may the first requests after a stall.
pub(crate) async fn eventually<T>(what: &str, call: impl AsyncFn() -> lock_core::Result<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match call().await {
            Ok(out) => return out,
            Err(e) if Instant::now() >= deadline => panic!("{what}: still failing: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
