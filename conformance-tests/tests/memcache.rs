//! memcached beyond the conformance suite: a stale owner's compare-and-delete
//! and compare-and-set against a new holder, eviction of a held lock, a
//! restart that loses the fence counter, TTL limits, an unreachable server,
//! an `add` whose reply was lost, one request per acquire, renewal and
//! release (a permit's too), and writes that land before a release's or
//! renewal's write on the CAS it knows or between its read and its
//! conditional write; a semaphore's slot items, read and written with plain
//! meta commands. Calls cut mid-exchange are in `memcache_cancel.rs`.

mod common {
    pub(crate) mod memcache;
}

use conformance_tests::kinds::Kinds;
use std::sync::Arc;
use std::time::Duration;

use common::memcache::backend;
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::memcached::Memcached;
use conformance_tests::targets::fresh_table;
use distlock::backends::memcache::MemcacheBackend;
use lock_core::backend::OwnerToken;
use lock_core::backend::{AcquireRequest, Lease, LockBackend};
use lock_core::{AcquireOptions, Error, LockKind, LockName, LockState, Locker, Wait};
use tokio::time::{Instant, sleep, sleep_until, timeout};

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(Wait::No)
}

/// A stale owner read the item (and its CAS) while it held the lock; the
/// lock then went away (expired or evicted) and a new holder took it. The
/// stale owner's compare-and-delete and compare-and-set must both miss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_never_deletes_or_extends_a_new_holders_lock() {
    let server = Memcached::shared().await;
    let url = server.url(&format!("prefix={}:", fresh_table()));
    let (a, b) = (backend(&url).await, backend(&url).await);
    let name = LockName::new("stale").expect("name");
    let key = a.lock_key(&name);
    let first = Locker::from_arc(a.clone() as Arc<dyn LockBackend>)
        .lease_kind("stale", LockKind::Exclusive, opts(Duration::from_secs(30)))
        .await
        .expect("free");
    // Step 1 of the stale owner's release or renewal: read the item.
    let seen = a.client().get(&key).await.expect("get").expect("held");
    assert_eq!(seen.value, first.owner().to_hex());
    // The lock vanishes (as on expiry or eviction) and somebody else takes it.
    assert!(
        a.client()
            .delete_if(&key, seen.cas)
            .await
            .expect("delete")
            .applied()
            .is_some()
    );
    let second = Locker::from_arc(b.clone() as Arc<dyn LockBackend>)
        .lease_kind("stale", LockKind::Exclusive, opts(Duration::from_secs(30)))
        .await
        .expect("taken over");
    // Step 2, with the stale CAS: neither may touch the new holder's item.
    assert!(
        a.client()
            .delete_if(&key, seen.cas)
            .await
            .expect("md")
            .applied()
            .is_none(),
        "stale compare-and-delete applied"
    );
    assert!(
        a.client()
            .set_if(&key, &seen.value, 30, seen.cas)
            .await
            .expect("ms")
            .applied()
            .is_none(),
        "stale compare-and-set applied"
    );
    let now = b
        .client()
        .get(&key)
        .await
        .expect("get")
        .expect("still held");
    assert_eq!(
        now.value,
        second.owner().to_hex(),
        "the new holder's lock is intact"
    );
    assert!(matches!(
        a.release(&first).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(matches!(
        a.renew(&first, Duration::from_secs(30)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(second.token() > first.token());
    b.release(&second).await.expect("release");
}

/// Under memory pressure memcached evicts a held lock: a second client gets
/// it while the first still believes it holds it, until its next renewal
/// reports the loss. This is why the backend is for efficiency locks only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_drops_a_held_lock() {
    let server = Memcached::start_with_memory(2).await;
    // A short key (the server is this test's alone), so that the lock's
    // item falls in the fillers' slab class.
    let url = server.url("prefix=evict:");
    let (a, b) = (
        Locker::from_arc(backend(&url).await),
        Locker::from_arc(backend(&url).await),
    );
    let guard = a
        .lock_with("evicted", opts(Duration::from_secs(9)))
        .await
        .expect("free");
    assert!(b.try_lock("evicted").await.is_err_and(|e| e.is_busy()));
    // Items the size of the lock's, in its slab class, far more than fit.
    server.fill(100_000, 32).await;
    let second = b
        .try_lock("evicted")
        .await
        .expect("the evicted lock is free again");
    timeout(Duration::from_secs(20), guard.lost())
        .await
        .expect("the first holder's renewal notices the loss");
    assert_eq!(guard.state(), LockState::Lost);
    second.release().await.expect("release");
}

/// A restart loses the fence counter with everything else; the counter is
/// seeded again from the clock, so tokens still go up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_survives_a_restart() {
    let server = Memcached::start().await;
    let url = server.url("");
    let before = {
        let l = Locker::from_arc(backend(&url).await);
        let g = l.try_lock("fence").await.expect("free");
        let t = g.token();
        g.release().await.expect("release");
        t
    };
    server.process().stop();
    server.process().restart();
    server.wait_ready().await;
    let l = Locker::from_arc(backend(&url).await);
    let g = timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(g) = l.try_lock("fence").await {
                return g;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("memcached is back");
    assert!(g.token() > before, "{:?} after {before:?}", g.token());
    g.release().await.expect("release");
}

/// TTLs memcached cannot keep as asked are refused, and nothing listening
/// is an error within the connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ttls_and_unreachable_servers_are_clear_errors() {
    let server = Memcached::shared().await;
    let l = Locker::from_arc(backend(&server.url("")).await);
    match l
        .lock_with("short", opts(Duration::from_millis(3500)))
        .await
    {
        Err(e @ Error::InvalidTtl { .. }) => assert!(e.to_string().contains("4s"), "{e}"),
        other => panic!("expected InvalidTtl, got {other:?}"),
    }
    let closed = conformance_tests::servers::ports::unused_port();
    let started = Instant::now();
    let err =
        MemcacheBackend::connect(&format!("memcache://127.0.0.1:{closed}?connect_timeout=1s"))
            .await
            .expect_err("nothing listens");
    assert!(err.is_retryable(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// An `add` was applied but its reply lost; the retry finds the lock already
/// its own. The lease it reports must not outlast the item on the server,
/// and its fencing token must be new, not the one the previous holder got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_add_after_a_lost_reply_neither_outlasts_the_item_nor_reuses_a_token() {
    let server = Memcached::shared().await;
    let proxy = Proxy::to(server.socket_addr()).await;
    let query = format!("prefix={}:", fresh_table());
    let a = backend(&server.url_via(proxy.port(), &query)).await;
    let b = backend(&server.url(&query)).await;
    let name = LockName::new("retried").expect("name");
    let key = b.lock_key(&name);
    let ttl = Duration::from_secs(4);
    let previous = b
        .try_acquire(&AcquireRequest::new(name.clone(), ttl))
        .await
        .expect("try_acquire")
        .expect("free");
    b.release(&previous).await.expect("release");

    let req = AcquireRequest::new(name, ttl);
    proxy.set(Fault::DropNextReply);
    let lost = a.try_acquire(&req).await;
    assert!(lost.is_err(), "the reply was lost: {lost:?}");
    assert_eq!(proxy.fault(), Fault::None, "the proxy dropped a reply");
    let owner = || async { b.client().get(&key).await.expect("get").map(|i| i.value) };
    assert_eq!(owner().await, Some(req.owner.to_hex()), "the add applied");

    // A waiting acquire retries after its backoff; the item's TTL runs from
    // the first send.
    sleep(Duration::from_secs(2)).await;
    let lease = a
        .try_acquire(&req)
        .await
        .expect("retry")
        .expect("already ours");
    let mut wrong = Vec::new();
    if lease.token() <= previous.token() {
        wrong.push(format!(
            "token {:?}, the previous holder's was {:?}",
            lease.token(),
            previous.token()
        ));
    }
    sleep_until(lease.deadline() - Duration::from_millis(300)).await;
    if owner().await != Some(req.owner.to_hex()) {
        wrong.push("the server freed the lock before the lease's deadline".into());
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    a.release(&lease).await.expect("release");
}

/// A backend whose requests go through a proxy, and one beside it that
/// plays the other writers, on one fresh prefix.
async fn proxied_pair(proxy: &Proxy) -> (Arc<MemcacheBackend>, Arc<MemcacheBackend>) {
    let server = Memcached::shared().await;
    // One connection: the proxy's count of requests is this backend's.
    let query = format!("prefix={}:&pool_size=1", fresh_table());
    (
        backend(&server.url_via(proxy.port(), &query)).await,
        backend(&server.url(&query)).await,
    )
}

/// Runs `call` with `proxy` letting one request through and holding any
/// later one: it fails if `call` needs a second.
async fn in_one_request<T>(proxy: &Proxy, call: impl Future<Output = T>) -> T {
    proxy.set(Fault::StallRequestsAfter(1));
    let outcome = timeout(Duration::from_secs(3), call)
        .await
        .expect("done in one request: a second one is held");
    proxy.set(Fault::None);
    outcome
}

/// Uncontended, an acquire (its add, counter increment and read written
/// together), a renewal and a release take one request each, and so does an
/// attempt on a held lock: the renewal and the release write on the CAS the
/// grant or the last renewal returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_a_renewal_and_a_release_take_one_request_each() {
    let proxy = Proxy::to(Memcached::shared().await.socket_addr()).await;
    let (a, b) = proxied_pair(&proxy).await;
    let name = LockName::new("one-each").expect("name");
    let ttl = Duration::from_secs(10);
    let lease = in_one_request(
        &proxy,
        a.try_acquire(&AcquireRequest::new(name.clone(), ttl)),
    )
    .await
    .expect("try_acquire")
    .expect("free");
    let busy = in_one_request(
        &proxy,
        a.try_acquire(&AcquireRequest::new(name.clone(), ttl)),
    )
    .await
    .expect("try_acquire");
    assert!(busy.is_none(), "another owner holds it");
    let renewed = in_one_request(&proxy, a.renew(&lease, Duration::from_secs(30)))
        .await
        .expect("renew");
    let item = b.client().get(&a.lock_key(&name)).await.expect("get");
    assert!(
        item.is_some_and(|i| i.ttl.is_some_and(|t| t > 10)),
        "the renewal set the longer expiry"
    );
    let next = in_one_request(
        &proxy,
        a.try_acquire(&AcquireRequest::new(name.clone(), ttl)),
    )
    .await
    .expect("try_acquire");
    assert!(next.is_none(), "still held");
    in_one_request(&proxy, a.release(&renewed))
        .await
        .expect("release");
    assert_eq!(b.client().get(&a.lock_key(&name)).await.expect("get"), None);
    let after = a
        .try_acquire(&AcquireRequest::new(name, ttl))
        .await
        .expect("try_acquire")
        .expect("free again");
    assert!(after.token() > lease.token(), "tokens go up");
    a.release(&after).await.expect("release");
}

/// A permit whose first slot is free takes one request (its add, the
/// counter and the read of every slot written together, as the floor's
/// bare add is one), an attempt on a full semaphore one, and a release one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_permit_a_full_semaphore_and_a_release_take_one_request_each() {
    const PERMITS: u32 = 2;
    let proxy = Proxy::to(Memcached::shared().await.socket_addr()).await;
    let (a, _) = proxied_pair(&proxy).await;
    let name = LockName::new("one-permit").expect("name");
    let req = || {
        AcquireRequest::new(name.clone(), Duration::from_secs(10))
            .with_kind(LockKind::permit(PERMITS))
    };
    let first = in_one_request(&proxy, a.try_acquire(&req()))
        .await
        .expect("try_acquire")
        .expect("a free semaphore");
    // The second may find its first slot taken by the first: then its add
    // there is refused and the free slot the read found is added next.
    let second = a
        .try_acquire(&req())
        .await
        .expect("try_acquire")
        .expect("a free permit");
    assert_ne!(first.slot(), second.slot());
    let full = in_one_request(&proxy, a.try_acquire(&req()))
        .await
        .expect("try_acquire");
    assert!(full.is_none(), "both permits are held");
    in_one_request(&proxy, a.release(&first))
        .await
        .expect("release");
    a.release(&second).await.expect("release");
}

/// Runs `call` (a release or renewal through `proxy`, of a lease whose CAS
/// is stale, so that its write on that CAS misses and it reads) with the
/// proxy holding each of its first `interleavings` writes that follow a read
/// (first the write on the stale CAS and the read go through, then a write
/// and a read between holds); `meanwhile` runs while a write is held.
async fn between_read_and_write<T: Send + 'static>(
    proxy: &Proxy,
    call: impl Future<Output = T> + Send + 'static,
    mut meanwhile: impl AsyncFnMut(),
    interleavings: u32,
) -> T {
    proxy.set(Fault::StallRequestsAfter(2));
    let mut held = proxy.held();
    let call = tokio::spawn(call);
    for i in 0..interleavings {
        let deadline = Instant::now() + Duration::from_secs(5);
        while proxy.held() == held {
            assert!(Instant::now() < deadline, "the proxy held no write");
            sleep(Duration::from_millis(2)).await;
        }
        held = proxy.held();
        meanwhile().await;
        // The held write goes, then the next read; the write after that is
        // held in turn.
        proxy.set(if i + 1 < interleavings {
            Fault::StallRequestsAfter(2)
        } else {
            Fault::None
        });
    }
    timeout(Duration::from_secs(10), call)
        .await
        .expect("the call finishes")
        .expect("task")
}

/// A lock held by `a` through the proxy, `b` on the same memcached directly.
struct Held {
    proxy: Proxy,
    a: Arc<MemcacheBackend>,
    b: Arc<MemcacheBackend>,
    key: String,
    lease: Lease,
}

impl Held {
    async fn new(name: &str) -> Self {
        let proxy = Proxy::to(Memcached::shared().await.socket_addr()).await;
        let (a, b) = proxied_pair(&proxy).await;
        let name = LockName::new(name).expect("name");
        let key = a.lock_key(&name);
        let lease = a
            .try_acquire(&AcquireRequest::new(name, Duration::from_secs(10)))
            .await
            .expect("try_acquire")
            .expect("free");
        Self {
            proxy,
            a,
            b,
            key,
            lease,
        }
    }
}

/// A write of `key` with the value it holds, as a renewal of the same lease
/// that was cut on the client's side lands late: a new CAS, the same owner.
async fn rewrite_as_a_late_renewal(b: &MemcacheBackend, key: &str, ttl: u64) {
    let item = b.client().get(key).await.expect("get").expect("held");
    assert!(
        b.client()
            .set_if(key, &item.value, ttl, item.cas)
            .await
            .expect("ms")
            .applied()
            .is_some(),
        "the late renewal applied"
    );
}

/// Renewals of the lease that were cut on the client's side landed: one
/// before the release, so its delete on the lease's CAS misses, and one
/// between the release's read and its compare-and-delete. The lock is still
/// ours, and the release must free it, not report it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_renewal_between_the_read_and_the_delete_does_not_fail_the_release() {
    let Held {
        proxy,
        a,
        b,
        key,
        lease,
    } = Held::new("late-renewal").await;
    rewrite_as_a_late_renewal(&b, &key, 10).await;
    let released = between_read_and_write(
        &proxy,
        {
            let (a, lease) = (a.clone(), lease.clone());
            async move { a.release(&lease).await }
        },
        async || rewrite_as_a_late_renewal(&b, &key, 10).await,
        1,
    )
    .await;
    assert!(
        released.is_ok(),
        "the lock was ours when released: {released:?}"
    );
    assert_eq!(
        b.client().get(&key).await.expect("get"),
        None,
        "the release freed the lock"
    );
}

/// The same interleaving for a renewal: it must extend the lock, not report
/// it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_renewal_between_the_read_and_the_set_does_not_fail_the_renewal() {
    let Held {
        proxy,
        a,
        b,
        key,
        lease,
    } = Held::new("late-renewal").await;
    rewrite_as_a_late_renewal(&b, &key, 10).await;
    let longer = Duration::from_secs(30);
    let renewed = between_read_and_write(
        &proxy,
        {
            let (a, lease) = (a.clone(), lease.clone());
            async move { a.renew(&lease, longer).await }
        },
        async || rewrite_as_a_late_renewal(&b, &key, 10).await,
        1,
    )
    .await
    .expect("the lock was ours when renewed");
    let item = b.client().get(&key).await.expect("get").expect("held");
    assert_eq!(item.value, lease.owner().to_hex());
    assert!(
        item.ttl.is_some_and(|t| t > 10),
        "the renewal set the longer expiry: {item:?}"
    );
    assert!(renewed.deadline() <= Instant::now() + longer);
    a.release(&renewed).await.expect("release");
}

/// The lock changes hands between the release's (or renewal's) read and its
/// write: the retry reads the new holder's token and stops; it never deletes
/// or extends the new holder's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_over_between_the_read_and_the_write_is_not_held_and_left_alone() {
    let proxy = Proxy::to(Memcached::shared().await.socket_addr()).await;
    let (a, b) = proxied_pair(&proxy).await;
    let name = LockName::new("taken-over").expect("name");
    let key = a.lock_key(&name);
    let ttl = Duration::from_secs(10);
    for renew in [false, true] {
        let lease = a
            .try_acquire(&AcquireRequest::new(name.clone(), ttl))
            .await
            .expect("try_acquire")
            .expect("free");
        rewrite_as_a_late_renewal(&b, &key, 10).await;
        let mut newer = None;
        let take_over = async || {
            // Gone (evicted, say), then another owner takes it.
            let item = b.client().get(&key).await.expect("get").expect("held");
            let deleted = b.client().delete_if(&key, item.cas).await.expect("md");
            assert!(deleted.applied().is_some());
            newer = b
                .try_acquire(&AcquireRequest::new(name.clone(), ttl))
                .await
                .expect("try_acquire");
        };
        let call = {
            let a = a.clone();
            async move {
                if renew {
                    a.renew(&lease, Duration::from_secs(30)).await.map(drop)
                } else {
                    a.release(&lease).await
                }
            }
        };
        let outcome = between_read_and_write(&proxy, call, take_over, 1).await;
        assert!(
            matches!(outcome, Err(Error::NotHeld { .. })),
            "renew: {renew}, {outcome:?}"
        );
        let newer = newer.expect("the other owner got the lock");
        let item = b.client().get(&key).await.expect("get").expect("held");
        assert_eq!(item.value, newer.owner().to_hex(), "the new holder's lock");
        assert!(item.ttl.is_some_and(|t| t <= 10), "not extended: {item:?}");
        b.release(&newer).await.expect("release");
    }
}

/// Late writes of our own land before every one of the release's tries: the
/// lock is still ours, so the release says it could not finish (retryable),
/// not that the lock was lost, and the lock is still there to release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cas_that_moves_before_every_try_is_a_retryable_error_not_a_loss() {
    let Held {
        proxy,
        a,
        b,
        key,
        lease,
    } = Held::new("moving").await;
    rewrite_as_a_late_renewal(&b, &key, 10).await;
    let released = between_read_and_write(
        &proxy,
        {
            let (a, lease) = (a.clone(), lease.clone());
            async move { a.release(&lease).await }
        },
        async || rewrite_as_a_late_renewal(&b, &key, 10).await,
        3,
    )
    .await;
    match released {
        Err(e) if e.is_retryable() => {}
        other => panic!("the lock stayed ours through every try: {other:?}"),
    }
    let item = b.client().get(&key).await.expect("get").expect("held");
    assert_eq!(item.value, lease.owner().to_hex());
    a.release(&lease).await.expect("release");
}

/// Stores `value` at `key` for `ttl` seconds on a connection of its own, as
/// another client, or a holder that then crashed, would have.
async fn store_by_hand(server: &Memcached, key: &str, value: &str, ttl: u64) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut conn = BufReader::new(
        tokio::net::TcpStream::connect(server.addr())
            .await
            .expect("connect to memcached"),
    );
    let command = format!("ms {key} {} T{ttl}\r\n{value}\r\n", value.len());
    conn.get_mut()
        .write_all(command.as_bytes())
        .await
        .expect("write ms");
    let mut reply = String::new();
    conn.read_line(&mut reply).await.expect("read reply");
    assert_eq!(reply.trim_end(), "HD", "storing {key} by hand");
}

/// The value at each of a semaphore's slot keys, as a plain read sees it.
async fn slot_values(
    b: &MemcacheBackend,
    prefix: &str,
    name: &str,
    permits: u32,
) -> Vec<Option<String>> {
    let mut values = Vec::new();
    for i in 0..permits {
        let item = b
            .client()
            .get(&format!("{prefix}{name}#sem#{i}"))
            .await
            .expect("get");
        values.push(item.map(|item| item.value));
    }
    values
}

/// A semaphore of N permits is N items `{prefix}{name}#sem#{i}`: N holders
/// are N slot items holding their owners' tokens; an item another client
/// wrote by hand (a crashed holder's) keeps its permit taken until it
/// expires; a release deletes its own slot and no other; and the mutex of
/// the same name is another lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_is_one_item_per_permit_holding_its_owners_token() {
    const PERMITS: u32 = 3;
    let server = Memcached::shared().await;
    let prefix = format!("{}:", fresh_table());
    let url = server.url(&format!("prefix={prefix}"));
    let (a, b) = (backend(&url).await, backend(&url).await);
    let (la, lb) = (
        Locker::from_arc(a.clone() as Arc<dyn LockBackend>),
        Locker::from_arc(b.clone() as Arc<dyn LockBackend>),
    );
    let permit = opts(Duration::from_secs(30));
    // Slot 1 holds a crashed holder's token, written by another client.
    let crashed = OwnerToken::random().to_hex();
    store_by_hand(server, &format!("{prefix}pool#sem#1"), &crashed, 30).await;
    let g1 = la
        .lock_kind("pool", LockKind::permit(PERMITS), permit)
        .await
        .expect("a free permit");
    let g2 = lb
        .lock_kind("pool", LockKind::permit(PERMITS), permit)
        .await
        .expect("a free permit");
    assert!(
        lb.semaphore("pool", PERMITS)
            .try_acquire()
            .await
            .is_err_and(|e| e.is_busy()),
        "the hand-written item left a third permit free"
    );
    let slots = slot_values(&b, &prefix, "pool", PERMITS).await;
    let (s1, s2) = (
        g1.lease().slot().expect("a permit names its slot"),
        g2.lease().slot().expect("a permit names its slot"),
    );
    assert_ne!(s1, s2);
    assert!(s1 != 1 && s2 != 1, "a grant took the crashed holder's slot");
    assert_eq!(slots[s1 as usize], Some(g1.lease().owner().to_hex()));
    assert_eq!(slots[s2 as usize], Some(g2.lease().owner().to_hex()));
    assert_eq!(slots[1], Some(crashed.clone()));
    assert_ne!(g1.token(), g2.token());
    assert!(
        b.client()
            .get(&format!("{prefix}pool#sem#fence"))
            .await
            .expect("get")
            .is_some(),
        "the semaphore's grants draw from its own counter"
    );
    // The mutex of the same name is another lock, on another key.
    let mutex = lb
        .try_lock("pool")
        .await
        .expect("the mutex is free beside a full semaphore");
    assert_eq!(
        b.client()
            .get(&format!("{prefix}pool"))
            .await
            .expect("get")
            .map(|i| i.value),
        Some(mutex.lease().owner().to_hex())
    );
    mutex.release().await.expect("release");
    // A release deletes its own slot only.
    let t1 = g1.token();
    g1.release().await.expect("release");
    let after = slot_values(&b, &prefix, "pool", PERMITS).await;
    assert_eq!(after[s1 as usize], None);
    assert_eq!(after[s2 as usize], slots[s2 as usize]);
    assert_eq!(after[1], Some(crashed));
    let g3 = lb
        .semaphore("pool", PERMITS)
        .try_acquire()
        .await
        .expect("the released permit is free");
    assert_eq!(g3.lease().slot(), Some(s1), "the only free slot");
    assert!(g3.token() != t1 && g3.token() != g2.token());
    g2.release().await.expect("release");
    g3.release().await.expect("release");
}

/// An attempt whose add applied but whose reply was lost left the owner's
/// token in some slot: a retry by the same owner gets that slot back (never
/// a second one), and `abandon` deletes every slot holding the owner — a
/// late add may have taken any — and leaves other owners' slots alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permits_retry_finds_its_slot_and_abandon_clears_every_slot_of_its_owner() {
    const PERMITS: u32 = 3;
    let server = Memcached::shared().await;
    let prefix = format!("{}:", fresh_table());
    let url = server.url(&format!("prefix={prefix}"));
    let (a, b) = (backend(&url).await, backend(&url).await);
    let req = AcquireRequest::new(
        LockName::new("pool").expect("name"),
        Duration::from_secs(30),
    )
    .with_kind(LockKind::permit(PERMITS));
    let owner = req.owner.to_hex();
    let slot = |i: u32| format!("{prefix}pool#sem#{i}");
    store_by_hand(server, &slot(2), &owner, 30).await;
    let lease = a
        .try_acquire(&req)
        .await
        .expect("try_acquire")
        .expect("the owner's own slot");
    assert_eq!(lease.slot(), Some(2));
    assert_eq!(lease.kind(), LockKind::permit(PERMITS));
    assert_eq!(
        slot_values(&b, &prefix, "pool", PERMITS).await,
        vec![None, None, Some(owner.clone())],
        "a retry took a second slot"
    );
    // A late add of the same owner lands in slot 0; another owner holds 1.
    let other = OwnerToken::random().to_hex();
    store_by_hand(server, &slot(0), &owner, 30).await;
    store_by_hand(server, &slot(1), &other, 30).await;
    a.abandon(&req).await.expect("abandon");
    assert_eq!(
        slot_values(&b, &prefix, "pool", PERMITS).await,
        vec![None, Some(other), None]
    );
    assert!(matches!(
        a.release(&lease).await,
        Err(Error::NotHeld { .. })
    ));
}
