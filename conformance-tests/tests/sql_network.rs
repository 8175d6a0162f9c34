//! Faults of the network between the backend and a real PostgreSQL or
//! MariaDB server, made by the fault proxy: a reply lost in the middle of an
//! acquire, an exhausted pool, an acquire that lands after its caller gave
//! up on it (it timed out, or dropped the future), and a retry after a
//! stall.

mod common {
    pub(crate) mod sql;
}

use conformance_tests::kinds::busy_is_none;
use std::time::Duration;

use common::sql::{locker, on_postgres_and_mariadb, opts};
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::SqlServer;
use conformance_tests::targets::fresh_table;
use lock_core::backend::AcquireRequest;
use lock_core::{Error, LockName, LockState, Locker, Wait};
use tokio::time::{Instant, sleep, timeout};

/// A backend whose one pooled connection goes through a fault proxy, and a
/// second backend on the same fresh table that reaches the server directly.
struct Proxied {
    proxy: Proxy,
    through_proxy: Locker,
    direct: Locker,
}

impl Proxied {
    /// `timeout` is both backends' request and connect timeout.
    async fn new(server: &dyn SqlServer, timeout: &str) -> Self {
        let proxy = Proxy::to(server.socket_addr()).await;
        let query = format!(
            "table={}&pool_size=1&timeout={timeout}&connect_timeout={timeout}",
            fresh_table()
        );
        let through_proxy = locker(&server.url_via(proxy.port(), &query)).await;
        let direct = locker(&server.url(&query)).await;
        // Prepare the statements on the one pooled connection, so the next
        // request is the test's own.
        through_proxy
            .try_lock("warm-up")
            .await
            .expect("free")
            .release()
            .await
            .expect("release");
        Self {
            proxy,
            through_proxy,
            direct,
        }
    }

    /// The pair the stall cases use: a short timeout, so that a stalled
    /// statement fails fast, and no request of the pool's own left in
    /// flight for the stall to catch.
    async fn for_stalls(server: &dyn SqlServer) -> Self {
        let s = Self::new(server, "1s").await;
        // sqlx pings a connection on its way back to the pool; let that
        // finish, so that a stall catches the next statement, not the ping.
        sleep(Duration::from_millis(300)).await;
        s
    }

    /// Ends the stall and waits until the one pooled connection serves a
    /// request again, which it does only after the statement stuck in the
    /// stall has been answered: from then on, that statement has landed.
    async fn end_stall(&self) {
        self.proxy.set(Fault::None);
        timeout(Duration::from_secs(10), async {
            while self.through_proxy.holder("warm-up").await.is_err() {
                sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the connection answers again once the stall ends");
    }

    /// Waits until `name` can be taken directly, then frees it.
    async fn free_soon(&self, name: &str, why: &str) {
        let freed = timeout(Duration::from_secs(10), async {
            loop {
                if let Some(g) = busy_is_none(self.direct.try_lock(name).await).expect("try_lock") {
                    return g;
                }
                sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect(why);
        freed.release().await.expect("release");
    }
}

/// The connection drops after the server applied an acquire but before its
/// reply arrived. Without waiting, the caller gets an error and the grant is
/// undone at once; with a wait, the retry finds its own grant and takes it.
async fn reply_lost_mid_acquire(server: &dyn SqlServer) {
    let s = Proxied::new(server, "2s").await;
    s.proxy.set(Fault::DropNextReply);
    let long = Duration::from_secs(60);
    match s.through_proxy.lock_with("cut", opts(long, Wait::No)).await {
        Err(e) => assert!(e.is_retryable(), "a dropped connection is retryable: {e}"),
        Ok(g) => panic!("the reply was dropped, yet the acquire succeeded: {g:?}"),
    }
    assert_eq!(s.proxy.fault(), Fault::None, "the fault fired");
    s.free_soon(
        "cut",
        "a grant whose reply was lost is undone long before its 60s TTL",
    )
    .await;

    s.proxy.set(Fault::DropNextReply);
    let adopted = s
        .through_proxy
        .lock_with("cut", opts(long, Wait::For(Duration::from_secs(10))))
        .await
        .expect("a retry with the same owner adopts the grant whose reply was lost");
    assert!(
        s.direct.try_lock("cut").await.is_err_and(|e| e.is_busy()),
        "held once, by the retry"
    );
    adopted.release().await.expect("release");
}

/// Every pooled connection is stuck (the server stalls): callers get a
/// timeout error, not a hang, and the pool recovers afterwards, with the
/// lock free (the stalled acquire, which lands when the stall ends, is
/// undone).
async fn pool_exhausted(server: &dyn SqlServer) {
    let s = Proxied::for_stalls(server).await;
    let l = &s.through_proxy;
    s.proxy.set(Fault::Stall);
    let started = Instant::now();
    let (first, second) = tokio::join!(l.try_lock("stuck"), l.try_lock("stuck"));
    for outcome in [first, second] {
        match outcome {
            Err(e @ Error::Timeout { .. }) => assert!(e.is_retryable()),
            other => panic!("expected a timeout error, got {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "bounded by the timeouts"
    );
    s.proxy.set(Fault::None);
    timeout(Duration::from_secs(15), async {
        loop {
            if let Ok(g) = l.try_lock("stuck").await {
                g.release().await.expect("release");
                return;
            }
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the pool works again once the server answers");
}

/// The network stalls while an acquire is on its way: the caller gives up,
/// and when the stall ends the statement still reaches the server and takes
/// the row. That grant must be undone as soon as the server answers, not left
/// to an owner nobody has until its TTL.
async fn stalled_acquire_is_undone(server: &dyn SqlServer) {
    let s = Proxied::for_stalls(server).await;
    s.proxy.set(Fault::Stall);
    let long = Duration::from_secs(60);
    match s
        .through_proxy
        .lock_with("late", opts(long, Wait::No))
        .await
    {
        Err(e) => assert!(e.is_retryable(), "a stalled server is retryable: {e}"),
        Ok(g) => panic!("acquired through a stalled network: {g:?}"),
    }
    assert_eq!(
        s.direct.holder("late").await.expect("holder"),
        None,
        "nothing reached the server during the stall"
    );
    s.end_stall().await;
    s.free_soon(
        "late",
        "a grant that landed after its caller gave up is undone long before its 60s TTL",
    )
    .await;
}

/// The same when the caller drops a backend's acquire future while the
/// statement is on its way, rather than timing out.
async fn dropped_acquire_is_undone(server: &dyn SqlServer) {
    let s = Proxied::for_stalls(server).await;
    s.proxy.set(Fault::Stall);
    let name = LockName::new("dropped").expect("a valid name");
    let req = AcquireRequest::new(name, Duration::from_secs(60));
    let backend = s.through_proxy.backend();
    timeout(Duration::from_millis(300), backend.try_acquire(&req))
        .await
        .expect_err("the acquire is still on its way when it is dropped");
    s.end_stall().await;
    s.free_soon(
        "dropped",
        "a grant whose acquire was dropped is undone long before its 60s TTL",
    )
    .await;
}

/// A waiting acquire whose first attempt is stuck in a stall: the retry
/// after the stall gets the lock, and undoing the stuck attempt's late grant
/// (same owner) does not free it under the new holder.
async fn retry_after_a_stall_keeps_its_grant(server: &dyn SqlServer) {
    let s = Proxied::for_stalls(server).await;
    s.proxy.set(Fault::Stall);
    let waiting = {
        let l = s.through_proxy.clone();
        tokio::spawn(async move {
            let opts = opts(Duration::from_secs(60), Wait::For(Duration::from_secs(20)));
            l.lock_with("retried", opts).await
        })
    };
    // Past the first attempt's limit (the timeout and the client's margin).
    sleep(Duration::from_millis(3000)).await;
    s.proxy.set(Fault::None);
    let guard = timeout(Duration::from_secs(30), waiting)
        .await
        .expect("bounded by the wait")
        .expect("the task")
        .expect("the retry gets the lock once the stall ends");
    // Give a wrongly ordered undo time to land.
    sleep(Duration::from_millis(500)).await;
    let holder = s.direct.holder("retried").await.expect("holder");
    assert_eq!(
        holder.map(|h| (h.owner, h.token)),
        Some((guard.lease().owner().short(), Some(guard.token()))),
        "the lock is still the retry's"
    );
    assert_eq!(guard.state(), LockState::Held);
    guard.release().await.expect("release");
}

on_postgres_and_mariadb!(
    own: [],
    shared: [
        reply_lost_mid_acquire,
        pool_exhausted,
        stalled_acquire_is_undone,
        dropped_acquire_is_undone,
        retry_after_a_stall_keeps_its_grant,
    ],
);
