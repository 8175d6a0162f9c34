//! The requests a semaphore's permit costs on etcd, counted by the server
//! itself (its `grpc_server_started_total` metric, on a member of this
//! test's own, so no other test's requests are counted): a free permit is
//! one `Txn` and its release one more; a permit waited for is its `Txn`, a
//! watch with a read sent beside it, the three reads a waiter makes while
//! its watch is silent (lock-etcd's `catch_up.rs`), and the release that
//! hands it over. A mutex's waiter makes those reads only in a short line.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use conformance_tests::kinds::Kinds;
use conformance_tests::servers::etcd::Etcd;
use distlock::backends::etcd::EtcdBackend;
use lock_core::{AcquireOptions, LockKind, Locker, Wait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout};

const TTL: Duration = Duration::from_secs(30);

/// RPCs started on the member at `addr`, by method.
async fn started(addr: &str) -> HashMap<String, u64> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).await.expect("metrics");
    let mut counts = HashMap::new();
    for line in body.lines() {
        let Some(labels) = line.strip_prefix("grpc_server_started_total{") else {
            continue;
        };
        let method = labels
            .split(',')
            .find_map(|l| l.strip_prefix("grpc_method=\""))
            .and_then(|m| m.split('"').next())
            .expect("a method label");
        let count: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .expect("a count");
        // Summed: the health service has a `Watch` of its own.
        *counts.entry(method.to_owned()).or_insert(0) += count;
    }
    counts
}

/// What was started between two readings, methods with none left out.
fn since(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> HashMap<String, u64> {
    after
        .iter()
        .map(|(m, n)| (m.clone(), n - before.get(m).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Waits until what was started since `before` is `enough` (a waiter's
/// requests reached the server; a fixed sleep could end first on a loaded
/// machine), at most 20 s.
async fn started_until(
    addr: &str,
    before: &HashMap<String, u64>,
    what: &str,
    enough: impl Fn(&HashMap<String, u64>) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = since(before, &started(addr).await);
        if enough(&now) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter did not {what} within 20 s: {now:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

fn counts(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(m, n)| ((*m).to_owned(), *n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_costs_one_txn_and_its_release_one() {
    let etcd = Etcd::start().await;
    let addr = etcd.members[0].client_addr.clone();
    let backend = EtcdBackend::connect(&etcd.url("rpcs", ""))
        .await
        .expect("connect");
    let l = Locker::from_arc(Arc::new(backend));
    let opts = AcquireOptions::with_ttl(TTL);
    let kind = LockKind::permit(2);
    // The session's lease is granted by the first acquire.
    l.lock_kind("pool", kind, opts.wait(Wait::No))
        .await
        .expect("a free permit")
        .release()
        .await
        .expect("release");

    let before = started(&addr).await;
    for _ in 0..5 {
        let g = l
            .lock_kind("pool", kind, opts.wait(Wait::No))
            .await
            .expect("a free permit");
        g.release().await.expect("release");
    }
    assert_eq!(
        since(&before, &started(&addr).await),
        counts(&[("Txn", 10)]),
        "five free permits taken and released"
    );

    // Both permits held (by tasks of their own: one task's second ask of a
    // permit would share its first); a waiter of the same client is first
    // in line.
    let mut held = Vec::new();
    for _ in 0..2 {
        let l = l.clone();
        held.push(
            tokio::spawn(async move { l.lock_kind("pool", kind, opts.wait(Wait::No)).await })
                .await
                .expect("task")
                .expect("a free permit"),
        );
    }
    let before = started(&addr).await;
    let waiter = {
        let l = l.clone();
        tokio::spawn(async move {
            l.lock_kind("pool", kind, opts.wait(Wait::For(Duration::from_secs(20))))
                .await
        })
    };
    // Until its put, its watch and the read beside it have reached the
    // server, and the three reads a waiter makes of its own while its watch
    // is silent, in case the watch started behind (lock-etcd's
    // `catch_up.rs`; a fixed sleep could end first on a loaded machine, and
    // the release would then find no waiter, or race a look), then a moment
    // for their answers to come back and the waiter to stand by for a
    // hand-over.
    started_until(&addr, &before, "put its key, watch and look", |now| {
        now.get("Watch") >= Some(&1) && now.get("Txn") >= Some(&5)
    })
    .await;
    sleep(Duration::from_millis(300)).await;
    let second = held.pop().expect("two");
    let first = held.pop().expect("two");
    first.release().await.expect("release");
    let granted = timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter is granted")
        .expect("task")
        .expect("a permit");
    granted.release().await.expect("release");
    assert_eq!(
        since(&before, &started(&addr).await),
        counts(&[("Txn", 7), ("Watch", 1)]),
        "the waiter's put, its watch and the read beside it, its three looks, the release that \
         grants it, its release"
    );
    second.release().await.expect("release");
}

/// A mutex's waiter looks for itself while its watch is silent (lock-etcd's
/// `catch_up.rs`) only in a short line: where etcd counts more than 16 keys
/// in its line, a look, which reads the whole line on the server, would
/// cost more than a watch that started late. Waiters of clients of their
/// own, so that each puts a key; the holder stays, so every watch is
/// silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_a_long_line_does_not_look() {
    let etcd = Etcd::start().await;
    let addr = etcd.members[0].client_addr.clone();
    let url = etcd.url("looks", "");
    let client = async || {
        let backend = EtcdBackend::connect(&url).await.expect("connect");
        Locker::from_arc(Arc::new(backend))
    };
    let opts = AcquireOptions::with_ttl(TTL);
    let holder = client()
        .await
        .lock_with("line", opts.wait(Wait::No))
        .await
        .expect("free");
    let mut waiters = Vec::new();
    // The `Txn`s of one more waiter, once it has put its key and its
    // watch stands silent, and `settled` says it made what it will make.
    let mut one_more = async |settled: &dyn Fn(&HashMap<String, u64>) -> bool| {
        let l = client().await;
        let before = started(&addr).await;
        waiters.push(tokio::spawn(async move {
            l.lock_with("line", opts.wait(Wait::For(Duration::from_secs(120))))
                .await
        }));
        started_until(&addr, &before, "queue", settled).await;
        // Past its last look, about 110 ms into a silent watch.
        sleep(Duration::from_millis(400)).await;
        since(&before, &started(&addr).await)
            .get("Txn")
            .copied()
            .unwrap_or(0)
    };
    let queued = |n: &HashMap<String, u64>| n.get("Watch") >= Some(&1) && n.get("Txn") >= Some(&1);
    let looked = |n: &HashMap<String, u64>| n.get("Watch") >= Some(&1) && n.get("Txn") >= Some(&4);
    for place in 1..=20 {
        let txns = if place <= 3 {
            one_more(&looked).await
        } else {
            one_more(&queued).await
        };
        match place {
            1..=3 => assert_eq!(txns, 4, "waiter {place}: its put and three looks"),
            // With the holder and itself, more than 16 keys.
            16..=20 => assert_eq!(txns, 1, "waiter {place}: its put alone"),
            _ => {}
        }
    }
    holder.release().await.expect("release");
    for w in waiters {
        let g = timeout(Duration::from_secs(60), w)
            .await
            .expect("granted in turn")
            .expect("task")
            .expect("granted");
        g.release().await.expect("release");
    }
}

/// The waiters of one backend on one lock share one watch of the lock's
/// range (lock-etcd's `shared_watch.rs`): three readers and a writer
/// queued behind a writer make one `Watch` between them (two at most),
/// not one each, and are all granted in turn (each releases as soon as it
/// holds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiters_of_one_backend_share_one_watch() {
    let etcd = Etcd::start().await;
    let addr = etcd.members[0].client_addr.clone();
    let backend = EtcdBackend::connect(&etcd.url("shared", ""))
        .await
        .expect("connect");
    let l = Locker::from_arc(Arc::new(backend));
    let opts = AcquireOptions::with_ttl(TTL).wait(Wait::For(Duration::from_secs(60)));
    let writer = l
        .lock_kind("catalog", LockKind::Write, opts)
        .await
        .expect("free");
    let before = started(&addr).await;
    let mut waiters = Vec::new();
    for kind in [
        LockKind::Read,
        LockKind::Read,
        LockKind::Read,
        LockKind::Write,
    ] {
        let l = l.clone();
        waiters.push(tokio::spawn(async move {
            let g = l.lock_kind("catalog", kind, opts).await?;
            g.release().await
        }));
    }
    // The waiters' puts (or most of them: a waiter's read counts as a
    // `Txn` too) and the shared watch have reached the server.
    started_until(&addr, &before, "queue", |n| {
        n.get("Watch") >= Some(&1) && n.get("Txn") >= Some(&4)
    })
    .await;
    sleep(Duration::from_millis(400)).await;
    writer.release().await.expect("release");
    for w in waiters {
        timeout(Duration::from_secs(30), w)
            .await
            .expect("every waiter is let in in turn")
            .expect("task")
            .expect("granted and released");
    }
    // One; a second only if the turns ran past the 5 s for which a shared
    // watch takes new waiters (a loaded machine). A watch per wait would
    // make at least four.
    let watches = since(&before, &started(&addr).await)
        .get("Watch")
        .copied()
        .unwrap_or(0);
    assert!(
        (1..=2).contains(&watches),
        "four waiters of one backend: {watches} watches"
    );
}
