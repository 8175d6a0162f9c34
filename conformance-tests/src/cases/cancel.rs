//! Cancel safety: an acquire dropped at any point leaves nothing held.

use std::time::Duration;

use lock_core::Wait;
use rand::Rng;
use tokio::time::{Instant, sleep, timeout};

use super::support::{locker, opts, unique};
use crate::{Target, Verdict};

/// An acquire dropped while waiting, or while its request is in flight,
/// leaves nothing held: the next client gets the lock without waiting for
/// any TTL.
pub async fn cancel_safety(t: &dyn Target) -> Verdict {
    let name = unique("cancel");
    let (a, b, c) = (locker(t).await, locker(t).await, locker(t).await);
    let long = Duration::from_secs(60);

    let holder = a
        .lock_with(&name, opts(long, Wait::No))
        .await
        .expect("free lock");
    let waiting = b.lock_with(&name, opts(long, Wait::For(long)));
    assert!(
        timeout(Duration::from_millis(200), waiting).await.is_err(),
        "the lock was held"
    );
    holder.release().await.expect("release");
    // A request the dropped waiter had in flight may still land after that
    // release (a slow pool on a loaded machine); the task that finishes it
    // gives the grant straight back. So the lock is free again far within
    // the waiter's 60 s lease, though not always at the first try.
    c.lock_with(&name, opts(long, Wait::For(Duration::from_secs(10))))
        .await
        .expect("a dropped waiter left nothing behind")
        .release()
        .await
        .expect("release");

    for i in 0..20 {
        // A zero timeout drops the acquire right after its first poll, with
        // its request in flight; the others cut it at random points.
        let cut = match i % 2 {
            0 => Duration::ZERO,
            _ => Duration::from_micros(rand::rng().random_range(0..4000)),
        };
        if let Ok(Ok(g)) = timeout(cut, b.lock_with(&name, opts(long, Wait::No))).await {
            g.release().await.expect("release");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match c.try_lock(&name).await {
                Ok(g) => {
                    g.release().await.expect("release");
                    break;
                }
                Err(e) => assert!(e.is_busy(), "try_lock: {e}"),
            }
            assert!(
                Instant::now() < deadline,
                "an acquire dropped after {cut:?} left the lock held"
            );
            sleep(Duration::from_millis(20)).await;
        }
    }
    Verdict::Passed
}
