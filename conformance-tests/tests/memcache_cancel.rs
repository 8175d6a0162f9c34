//! memcached calls cut mid-exchange: many tasks whose backend calls are cut
//! at random instants, a request cut after its write, a wait for a pooled
//! connection bounded by the request's timeout, and releases that cut a
//! renewal in flight.

mod common {
    pub(crate) mod memcache;
}

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::memcache::backend;
use conformance_tests::cut::maybe_cut_after;
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::memcached::Memcached;
use conformance_tests::targets::fresh_table;
use distlock::backends::memcache::{MIN_TTL, MemcacheBackend};
use lock_core::backend::{AcquireRequest, Lease, LockBackend};
use lock_core::{Error, FencingToken, LockName};
use rand::Rng;
use tokio::time::{Instant, sleep, timeout};

/// Many tasks on a few names share one backend's small pool, and any backend
/// call may be cut at a random instant, as a released guard cuts its renewal
/// in flight. A connection left with an unread reply hands it to the next
/// request on it: protocol errors, and an `add` that reads a stale `HD`
/// grants a lock somebody else holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cut_at_random_instants_never_desync_the_pool_or_grant_twice() {
    let server = Memcached::shared().await;
    let url = server.url(&format!("prefix={}:&pool_size=3", fresh_table()));
    let backend = backend(&url).await;
    let names: Arc<Vec<LockName>> = Arc::new(
        (0..3)
            .map(|i| LockName::new(format!("cut-{i}")).expect("name"))
            .collect(),
    );
    let book = Arc::new(Mutex::new(Book::default()));
    let stop = Instant::now() + Duration::from_secs(3);
    let tasks: Vec<_> = (0..24)
        .map(|_| tokio::spawn(churn(backend.clone(), names.clone(), book.clone(), stop)))
        .collect();
    for task in tasks {
        timeout(Duration::from_secs(30), task)
            .await
            .expect("every call is bounded")
            .expect("task");
    }
    let book = book.lock().expect("book");
    assert!(
        book.problems.is_empty(),
        "{} problems in {} grants, the first ones: {:#?}",
        book.problems.len(),
        book.grants,
        &book.problems[..book.problems.len().min(5)]
    );
    assert!(book.grants >= 50, "only {} grants", book.grants);
}

/// What the churning tasks saw: who holds each name by its own valid lease,
/// the last token granted, and anything that should not have happened.
#[derive(Default)]
struct Book {
    held: HashMap<LockName, Lease>,
    last_token: HashMap<LockName, FencingToken>,
    grants: u64,
    problems: Vec<String>,
}

impl Book {
    fn granted(&mut self, lease: &Lease) {
        if lease.is_expired() {
            return; // a grant nobody may act on
        }
        self.grants += 1;
        let name = lease.name();
        if let Some(other) = self.held.get(name)
            && !other.is_expired()
        {
            self.problems.push(format!(
                "{name} granted to {} while {} holds it",
                lease.owner().short(),
                other.owner().short()
            ));
        }
        if let Some(last) = self.last_token.get(name)
            && lease.token() <= *last
        {
            self.problems
                .push(format!("{name}: token {:?} after {last:?}", lease.token()));
        }
        self.last_token.insert(name.clone(), lease.token());
        self.held.insert(name.clone(), lease.clone());
    }

    fn is_holder(&self, lease: &Lease) -> bool {
        self.held
            .get(lease.name())
            .is_some_and(|l| l.owner() == lease.owner())
    }

    fn renewed(&mut self, lease: &Lease) {
        if self.is_holder(lease) {
            self.held.insert(lease.name().clone(), lease.clone());
        }
    }

    /// Called before the release is sent: from then on another may get it.
    fn releasing(&mut self, lease: &Lease) {
        if self.is_holder(lease) {
            self.held.remove(lease.name());
        }
    }
}

/// `f`, cut at the first await, at a random instant (finer than tokio's
/// timer: `cut_after`), or not at all: `Err` when it was cut.
async fn maybe_cut<F: Future>(f: F) -> Result<F::Output, ()> {
    let after = {
        let mut rng = rand::rng();
        match rng.random_range(0..4) {
            0 => Some(Duration::ZERO),
            1 => None,
            _ => Some(Duration::from_micros(rng.random_range(0..2000))),
        }
    };
    maybe_cut_after(after, f).await.ok_or(())
}

async fn churn(
    b: Arc<MemcacheBackend>,
    names: Arc<Vec<LockName>>,
    book: Arc<Mutex<Book>>,
    stop: Instant,
) {
    let note = |what: String| book.lock().expect("book").problems.push(what);
    while Instant::now() < stop {
        let name = names[rand::rng().random_range(0..names.len())].clone();
        let req = AcquireRequest::new(name, MIN_TTL);
        let (granted, was_cut) = match maybe_cut(b.try_acquire(&req)).await {
            Ok(outcome) => (outcome, false),
            // The retry of a cut attempt adopts whatever that attempt got.
            Err(_) if rand::random() => (b.try_acquire(&req).await, true),
            Err(_) => (Ok(None), true),
        };
        let mut lease = match granted {
            Ok(Some(lease)) => lease,
            Ok(None) | Err(_) => {
                if let Err(e) = granted {
                    note(format!("acquire: {e}"));
                }
                if was_cut && let Err(e) = b.abandon(&req).await {
                    note(format!("abandon: {e}"));
                }
                continue;
            }
        };
        book.lock().expect("book").granted(&lease);
        if rand::random() {
            match maybe_cut(b.renew(&lease, MIN_TTL)).await {
                Ok(Ok(renewed)) => {
                    book.lock().expect("book").renewed(&renewed);
                    lease = renewed;
                }
                Ok(Err(e)) if !lease.is_expired() => note(format!("renew: {e}")),
                Ok(Err(_)) | Err(_) => {}
            }
        }
        book.lock().expect("book").releasing(&lease);
        match maybe_cut(b.release(&lease)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if !lease.is_expired() => note(format!("release: {e}")),
            Ok(Err(_)) => {}
            Err(_) => match b.release(&lease).await {
                Ok(()) | Err(Error::NotHeld { .. }) => {}
                Err(e) => note(format!("release after a cut one: {e}")),
            },
        }
    }
}

/// A request cut after it was written, its reply still on the way, must not
/// leave that reply for the next request on the same connection: an `add`
/// reading the stale `HD` would grant a lock another client holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cut_after_its_write_leaves_no_reply_for_the_next() {
    let server = Memcached::shared().await;
    let proxy = Proxy::to(server.socket_addr()).await;
    let query = format!("prefix={}:&pool_size=1", fresh_table());
    let cut = backend(&server.url_via(proxy.port(), &query)).await;
    let other = backend(&server.url(&query)).await;
    let long = Duration::from_secs(30);
    let held = other
        .try_acquire(&AcquireRequest::new(
            LockName::new("held").expect("name"),
            long,
        ))
        .await
        .expect("try_acquire")
        .expect("free");

    proxy.set(Fault::Stall);
    let first = AcquireRequest::new(LockName::new("first").expect("name"), long);
    assert!(
        timeout(Duration::from_millis(300), cut.try_acquire(&first))
            .await
            .is_err(),
        "the proxy held the request"
    );
    proxy.set(Fault::None);
    // The `add` goes through now and its `HD` comes back to the connection
    // it was written on, if that connection is still open.
    let first_key = cut.lock_key(&first.name);
    let deadline = Instant::now() + Duration::from_secs(5);
    while other.client().get(&first_key).await.expect("get").is_none() && Instant::now() < deadline
    {
        sleep(Duration::from_millis(20)).await;
    }
    sleep(Duration::from_millis(100)).await;

    let held_key = cut.lock_key(held.name());
    let (added, _, _) = cut
        .client()
        .add_then_increment(&held_key, "intruder", 30, "intruder#fence", 1)
        .await
        .expect("add");
    assert!(
        added.applied().is_none(),
        "an add of a held key was granted"
    );
    for _ in 0..4 {
        let intruder = AcquireRequest::new(held.name().clone(), long);
        match cut.try_acquire(&intruder).await {
            Ok(None) => {}
            outcome => panic!("another client holds the lock, yet: {outcome:?}"),
        }
    }
    let item = cut
        .client()
        .get(&held_key)
        .await
        .expect("get")
        .expect("held");
    assert_eq!(
        item.value,
        held.owner().to_hex(),
        "a read got its own reply"
    );
    other.release(&held).await.expect("release");
}

/// Waiting for a pooled connection counts against a request's timeout: with
/// the only connection taken by a request the server never answers, a
/// second request fails within its own timeout, not the first's plus its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_connection_counts_against_the_timeout() {
    let server = Memcached::shared().await;
    let proxy = Proxy::to(server.socket_addr()).await;
    let query = format!("prefix={}:&pool_size=1&timeout=2s", fresh_table());
    let b = backend(&server.url_via(proxy.port(), &query)).await;
    proxy.set(Fault::Stall);
    let first = tokio::spawn({
        let b = b.clone();
        async move { b.client().get("first").await }
    });
    sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let second = b.client().get("second").await;
    let took = started.elapsed();
    proxy.set(Fault::None);
    assert!(
        matches!(second, Err(Error::Timeout { .. })),
        "the server never answered: {second:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the second request gave up after {took:?}; its timeout is 2s"
    );
    assert!(first.await.expect("task").is_err(), "the first timed out");
}

/// A guard's release cuts its renewal in flight, as `LockGuard::release`
/// does: the renewal is dropped at a random instant and the release sent at
/// once. Whatever the renewal got to write, the lock was ours, so the
/// release must free it and never report it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_cuts_a_renewal_in_flight_never_reports_a_loss() {
    let server = Memcached::shared().await;
    let a = backend(&server.url(&format!("prefix={}:", fresh_table()))).await;
    let ttl = Duration::from_secs(10);
    let mut wrong = Vec::new();
    for i in 0..2000 {
        let req = AcquireRequest::new(
            LockName::new(format!("cut-renewal-{i}")).expect("name"),
            ttl,
        );
        let lease = a
            .try_acquire(&req)
            .await
            .expect("try_acquire")
            .expect("free");
        let renewal = tokio::spawn({
            let (a, lease) = (a.clone(), lease.clone());
            async move { a.renew(&lease, ttl).await }
        });
        // Finer than a timer can sleep: the renewal's exchanges take about
        // as long as this spins.
        let cut_at = Duration::from_micros(rand::rng().random_range(0..100));
        let spin = std::time::Instant::now();
        while spin.elapsed() < cut_at {
            std::hint::spin_loop();
        }
        renewal.abort();
        if let Err(e) = a.release(&lease).await {
            wrong.push(format!("cut after {cut_at:?}: {e}"));
        }
        let left = a.client().get(&a.lock_key(&req.name)).await.expect("get");
        if left.is_some() {
            wrong.push(format!(
                "cut after {cut_at:?}: still held after the release"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of 2000: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}
