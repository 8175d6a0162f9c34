//! The FIFO case for backends that queue waiters on the server: it takes a
//! queue probe, so etcd's and ZooKeeper's tests call it rather than the
//! suite.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, Wait};
use tokio::time::sleep;

use super::support::opts;

/// For backends that queue waiters on the server (etcd, ZooKeeper): waiters
/// are granted in the order they queued, and each release wakes exactly one
/// of them — no herd. `queued(n)` returns once `n` contenders (holder
/// included) are queued on the server; the backend's count of server
/// wake-ups is read from [`Locker::stats`].
pub async fn fifo_one_wake_up_per_release<Q, Fut>(
    locker: &Locker,
    waiters: usize,
    ttl: Duration,
    queued: Q,
) where
    Q: Fn(usize) -> Fut,
    Fut: std::future::Future,
{
    let holder = locker
        .lock_with("fifo", opts(ttl, Wait::No))
        .await
        .expect("free");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let (l, order) = (locker.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = l
                .lock_with("fifo", opts(ttl, Wait::For(Duration::from_secs(30))))
                .await
                .expect("granted in turn");
            order.lock().expect("poisoned").push(i);
            sleep(Duration::from_millis(20)).await;
            g.release().await.expect("release");
        }));
        let _ = queued(i + 2).await;
    }
    let wakeups = || locker.stats().wakeups;
    let woken_before = wakeups();
    holder.release().await.expect("release");
    for t in tasks {
        t.await.expect("waiter");
    }
    assert_eq!(
        *order.lock().expect("poisoned"),
        (0..waiters).collect::<Vec<_>>(),
        "FIFO"
    );
    assert_eq!(
        wakeups() - woken_before,
        waiters as u64,
        "one wake-up per release, no herd"
    );
}
