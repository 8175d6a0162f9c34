//! etcd under faults: with etcd black-holed behind the fault proxy, every
//! call ends within its own timeout whatever else is queued — the orphaned
//! keys of abandoned acquires are deleted in the background, not in front
//! of the next renewal.

mod common {
    pub(crate) mod bounded;
}

use std::sync::Arc;
use std::time::Duration;

use common::bounded::{all_fail_within, at_once, timed};
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::etcd::Etcd;
use conformance_tests::targets::fresh_table;
use distlock::lock_etcd::EtcdBackend;
use lock_core::backend::{AcquireRequest, LockBackend};
use lock_core::{AcquireOptions, LockName, Locker, Wait};
use tokio::time::{Instant, sleep_until};

/// The request timeout the backend is given.
const TIMEOUT: Duration = Duration::from_millis(200);

/// A lease of 3 s: its session is renewed (a keep-alive sent) by a renewal
/// once its proof is older than half of a third of that.
const TTL: Duration = Duration::from_secs(3);

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
/// request timeout [`TIMEOUT`].
async fn proxied() -> (Proxy, Arc<EtcdBackend>, Locker) {
    let proxy = proxy_to(Etcd::shared().await).await;
    let url = format!(
        "etcd://127.0.0.1:{}/{}?timeout={}ms",
        proxy.port(),
        fresh_table(),
        TIMEOUT.as_millis()
    );
    let backend = Arc::new(EtcdBackend::connect(&url).await.expect("connect"));
    let locker = Locker::from_arc(backend.clone() as Arc<dyn LockBackend>);
    (proxy, backend, locker)
}

/// Ten acquires abandoned while etcd is black-holed leave ten orphaned
/// keys on the session of a held lease. The renewal of that lease must
/// not wait for their deletion: it fails within its timeout, as do
/// `is_held`, `release` and `try_lock`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_etcd_fails_each_call_within_its_timeout() {
    let (proxy, backend, locker) = proxied().await;
    let opts = AcquireOptions::with_ttl(TTL).wait(Wait::No);
    let lease = locker.acquire_lease("held", opts).await.expect("free");
    let granted = Instant::now();

    proxy.set(Fault::Stall);
    let abandons = at_once(10, |i| {
        let backend = backend.clone();
        let name = LockName::new(format!("abandoned-{i}")).expect("a name");
        async move { backend.abandon(&AcquireRequest::new(name, TTL)).await }
    });
    all_fail_within("abandon", abandons, 2 * TIMEOUT).await;
    // The session's proof (sent before `granted`) is old enough that the
    // renewal sends a keep-alive, which is when orphans are retried.
    sleep_until(granted + TTL / 6 + Duration::from_millis(100)).await;

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
    let (took, released) = timed(backend.release(&lease)).await;
    assert!(released.is_err(), "released through a black hole");
    assert!(
        took < bound,
        "release took {took:?}; the bound is {bound:?}"
    );
    // One attempt, then the locker's undo of it: two requests at most.
    let bound = 3 * TIMEOUT;
    let (took, tried) = timed(locker.lock_with("another", opts)).await;
    assert!(tried.is_err(), "try_lock through a black hole: {tried:?}");
    assert!(
        took < bound,
        "try_lock took {took:?}; the bound is {bound:?}"
    );
}

/// Renewals of ten leases on one session while etcd is black-holed share
/// the keep-alive in flight, and its failure: none waits for the failed
/// keep-alives of those before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_renewals_share_one_failed_keep_alive() {
    let (proxy, backend, locker) = proxied().await;
    let opts = AcquireOptions::with_ttl(TTL).wait(Wait::No);
    let mut leases = Vec::new();
    for i in 0..10 {
        let lease = locker.acquire_lease(format!("held-{i}"), opts).await;
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
    let (proxy, _, locker) = proxied().await;
    let opts = AcquireOptions::with_ttl(TTL).wait(Wait::No);
    proxy.set(Fault::Stall);
    let acquires = at_once(10, |i| {
        let locker = locker.clone();
        async move { locker.lock_with(format!("new-{i}"), opts).await }
    });
    // The grant, then the locker's undo of the attempt.
    all_fail_within("try_lock", acquires, 3 * TIMEOUT).await;
}
