//! etcd under faults: with etcd black-holed behind the fault proxy, every
//! call ends within its own timeout whatever else is queued — the orphaned
//! keys of abandoned acquires are deleted in the background, not in front
//! of the next renewal.

mod common {
    pub(crate) mod bounded;
    pub(crate) mod etcd;
}

use conformance_tests::kinds::Kinds;
use std::sync::Arc;
use std::time::Duration;

use common::bounded::{all_fail_within, at_once, eventually, timed};
use common::etcd::{queued, wait_for_queue};
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::etcd::Etcd;
use conformance_tests::targets::fresh_table;
use distlock::backends::etcd::EtcdBackend;
use lock_core::backend::LockBackend;
use lock_core::{AcquireOptions, Locker, Wait};
use tokio::time::{Instant, sleep_until};

/// The request timeout the backend is given.
const TIMEOUT: Duration = Duration::from_millis(200);

/// A lease of 3 s: its session is renewed (a keep-alive sent) by a renewal
/// once its proof is older than half of a third of that.
const TTL: Duration = Duration::from_secs(3);

/// How the locks a test holds are taken: a request of 200 ms may time out
/// on a loaded machine, and the acquire then tries again.
fn patient() -> AcquireOptions {
    AcquireOptions::with_ttl(TTL).wait(Wait::For(Duration::from_secs(20)))
}

/// The proxy's port in front of the member's address (a name is resolved).
async fn proxy_to(etcd: &Etcd) -> Proxy {
    let addr = tokio::net::lookup_host(&etcd.members[0].client_addr)
        .await
        .expect("the member's address")
        .next()
        .expect("one address");
    Proxy::to(addr).await
}

/// A backend through a new proxy in front of the shared etcd, with the
/// request timeout [`TIMEOUT`], and its key prefix.
async fn proxied() -> (Proxy, Arc<EtcdBackend>, Locker, String) {
    let proxy = proxy_to(Etcd::shared().await).await;
    let prefix = fresh_table();
    let url = format!(
        "etcd://127.0.0.1:{}/{prefix}?timeout={}ms",
        proxy.port(),
        TIMEOUT.as_millis()
    );
    let backend = Arc::new(eventually("connect", || EtcdBackend::connect(&url)).await);
    let locker = Locker::from_arc(backend.clone() as Arc<dyn LockBackend>);
    (proxy, backend, locker, prefix)
}

/// Ten waiting acquires given up while etcd is black-holed leave ten
/// orphaned keys on the session of a held lease. The renewal of that lease
/// must not wait for their deletion: it fails within its timeout, as do
/// `is_held`, `release` and an acquire. Once etcd is back, the next
/// keep-alive deletes the orphans, in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_etcd_fails_each_call_within_its_timeout() {
    let (proxy, backend, locker, prefix) = proxied().await;
    let etcd = Etcd::shared().await;
    let direct = Locker::from_arc(Arc::new(
        EtcdBackend::connect(&etcd.url(&prefix, ""))
            .await
            .expect("connect"),
    ));
    let opts = AcquireOptions::with_ttl(TTL).wait(Wait::No);
    let lease = locker
        .lease_kind("held", lock_core::LockKind::Exclusive, patient())
        .await
        .expect("free");
    let released = locker
        .lease_kind("released", lock_core::LockKind::Exclusive, patient())
        .await
        .expect("free");
    let granted = Instant::now();
    let holder = direct.lock_with("contended", opts).await.expect("free");
    let dir = format!("{prefix}/contended/");
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            let locker = locker.clone();
            let wait = opts.wait(Wait::For(Duration::from_secs(60)));
            tokio::spawn(async move { locker.lock_with("contended", wait).await })
        })
        .collect();
    wait_for_queue(etcd, &dir, 11).await;

    proxy.set(Fault::Stall);
    // Given up: each waiter's key cannot be deleted, and is left to the
    // session's next keep-alive.
    for waiter in &waiters {
        waiter.abort();
    }
    // The session's proof (sent before `granted`) is old enough that the
    // renewal sends a keep-alive, which is when orphans are retried.
    sleep_until(granted.max(Instant::now()) + TTL / 6 + Duration::from_millis(100)).await;

    let bound = 2 * TIMEOUT;
    let (took, renewed) = timed(backend.renew(&lease, TTL)).await;
    eprintln!("renew with ten orphans pending: {took:?}, {renewed:?}");
    assert!(renewed.is_err(), "renewed through a black hole");
    assert!(took < bound, "renew took {took:?}; the bound is {bound:?}");
    let (took, held) = timed(backend.is_held(&lease)).await;
    assert!(held.is_err(), "is_held through a black hole: {held:?}");
    assert!(
        took < bound,
        "is_held took {took:?}; the bound is {bound:?}"
    );
    let (took, gone) = timed(backend.release(&released)).await;
    assert!(gone.is_err(), "released through a black hole");
    assert!(
        took < bound,
        "release took {took:?}; the bound is {bound:?}"
    );
    // The locker's undo of the attempt runs in the background.
    let (took, tried) = timed(locker.lock_with("another", opts)).await;
    assert!(tried.is_err(), "try_lock through a black hole: {tried:?}");
    assert!(
        took < bound,
        "try_lock took {took:?}; the bound is {bound:?}"
    );

    proxy.set(Fault::None);
    let mut renewed = eventually("renew", || backend.renew(&lease, TTL)).await;
    assert_eq!(renewed.token(), lease.token());
    // The renewals keep the session alive, so only its keep-alives' cleanup
    // can delete the orphans; and they keep the lease ours while that takes
    // (a deletion that timed out on a loaded machine waits for the next
    // keep-alive, which a lease left alone for its TTL would not see).
    let deadline = Instant::now() + Duration::from_secs(20);
    while queued(etcd, &dir) != 1 {
        assert!(
            Instant::now() < deadline,
            "the orphans under {dir} were never deleted"
        );
        let again = eventually("renew", || backend.renew(&renewed, TTL)).await;
        renewed = again;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    holder.release().await.expect("release");
    backend.release(&renewed).await.expect("still ours");
}

/// Renewals of ten leases on one session while etcd is black-holed share
/// the keep-alive in flight, and its failure: none waits for the failed
/// keep-alives of those before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_renewals_share_one_failed_keep_alive() {
    let (proxy, backend, locker, _) = proxied().await;
    let mut leases = Vec::new();
    for i in 0..10 {
        let lease = locker
            .lease_kind(
                format!("held-{i}"),
                lock_core::LockKind::Exclusive,
                patient(),
            )
            .await;
        leases.push(lease.expect("free"));
    }
    let granted = Instant::now();
    proxy.set(Fault::Stall);
    // Old enough that each renewal needs a keep-alive.
    sleep_until(granted + TTL / 6 + Duration::from_millis(100)).await;
    let renewals = at_once(leases.len(), |i| {
        let (backend, lease) = (backend.clone(), leases[i].clone());
        async move { backend.renew(&lease, TTL).await }
    });
    all_fail_within("renew", renewals, 2 * TIMEOUT).await;
}

/// Ten first acquires while etcd is black-holed (no session yet, so each
/// needs a lease grant) share the grant in flight, and its failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_acquires_share_one_failed_lease_grant() {
    let (proxy, _, locker, _) = proxied().await;
    let opts = AcquireOptions::with_ttl(TTL).wait(Wait::No);
    proxy.set(Fault::Stall);
    let acquires = at_once(10, |i| {
        let locker = locker.clone();
        async move { locker.lock_with(format!("new-{i}"), opts).await }
    });
    // The locker's undo of each attempt runs in the background.
    all_fail_within("try_lock", acquires, 2 * TIMEOUT).await;
}
