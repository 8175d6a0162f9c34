//! Cutting a future short at a point finer than tokio's timer, whose
//! millisecond ticks would let every sub-millisecond step (a round trip on
//! loopback) finish before a cut.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Polls `f` until it is ready or `after` has passed, then drops it: the
/// future's output, or `None` when it was cut. The task yields between
/// polls (spinning rather than sleeping), so the cut lands at its first
/// poll after `after`: microseconds late on a runtime with a core to
/// spare, later behind other ready tasks or a preempted thread. It spins
/// for as long as `f` runs, up to `after`: give it cuts, not calls meant
/// to finish.
pub async fn cut_after<F: Future>(after: Duration, f: F) -> Option<F::Output> {
    let deadline = Instant::now() + after;
    let mut f = pin!(f);
    loop {
        let polled = std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await;
        if let Poll::Ready(output) = polled {
            return Some(output);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::task::yield_now().await;
    }
}

/// [`cut_after`] when `after` is given, else `f` awaited to its end: a call
/// that is cut at a chosen instant or left whole, the caller picking which.
pub async fn maybe_cut_after<F: Future>(after: Option<Duration>, f: F) -> Option<F::Output> {
    match after {
        Some(after) => cut_after(after, f).await,
        None => Some(f.await),
    }
}
