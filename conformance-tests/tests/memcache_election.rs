//! Elections on memcached beyond the conformance suite: the election's
//! item and fence counter beside the mutex's and the semaphore's of the
//! same name, read with plain meta commands; keep-alive renewals that
//! write the proclaimed value back; an add whose reply was lost, whose
//! item names no term (and so no leader) until the retry writes one; and
//! observers in the candidate's process woken by its changes, not polls.

mod common {
    pub(crate) mod memcache;
}

use std::sync::Arc;
use std::time::Duration;

use common::memcache::backend;
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::memcached::Memcached;
use conformance_tests::targets::fresh_table;
use lock_core::backend::{AcquireRequest, LockBackend};
use lock_core::{AcquireOptions, LockKind, LockName, LockState, Locker, Wait};
use tokio::time::{sleep, timeout};

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(Wait::No)
}

/// The election of a name is the item `{prefix}{name}#elect`, holding
/// `{owner} {term} {value}`, with its own counter `…#elect#fence` whose
/// value is the term; the mutex and a semaphore of the same name are held
/// beside it, and the mutex's item still holds its owner alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_is_one_item_beside_the_mutex_and_the_semaphore_of_its_name() {
    let server = Memcached::shared().await;
    let prefix = format!("{}:", fresh_table());
    let b = backend(&server.url(&format!("prefix={prefix}"))).await;
    let locker = Locker::from_arc(b.clone() as Arc<dyn LockBackend>);
    let ttl = opts(Duration::from_secs(30));
    let mutex = locker.lock_with("jobs", ttl).await.expect("the mutex");
    let permit = locker
        .semaphore("jobs", 1)
        .acquire_with(ttl)
        .await
        .expect("the semaphore's only permit");
    let leading = locker
        .election("jobs")
        .campaign_with("host a:1", ttl)
        .await
        .expect("the election, beside the mutex and the semaphore");

    let read = |key: String| {
        let b = b.clone();
        async move { b.client().get(&key).await.expect("get").map(|i| i.value) }
    };
    let owner = leading.lease().owner().to_hex();
    let term = leading.term().get();
    assert_eq!(
        read(format!("{prefix}jobs#elect")).await,
        Some(format!("{owner} {term} host a:1"))
    );
    assert_eq!(
        read(format!("{prefix}jobs#elect#fence")).await,
        Some(term.to_string())
    );
    assert_eq!(
        read(b.lock_key(&LockName::new("jobs").expect("name"))).await,
        Some(mutex.lease().owner().to_hex()),
        "the mutex's item is its owner alone"
    );
    let holders = locker
        .election("jobs")
        .leader()
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(
        (holders.value.as_str(), holders.term),
        ("host a:1", leading.term())
    );

    leading.resign().await.expect("resign");
    assert_eq!(read(format!("{prefix}jobs#elect")).await, None);
    assert!(
        mutex.is_held().await.expect("ask"),
        "a resign left the mutex"
    );
    assert!(permit.is_held().await.expect("ask"), "and the permit");
    mutex.release().await.expect("release");
    permit.release().await.expect("release");
}

/// A renewal must write the item's value back whole: the keep-alive of a
/// leader that proclaimed keeps the proclaimed value and the term, past
/// several renewals and past the TTL the item had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_the_proclaimed_value_and_the_term() {
    let server = Memcached::shared().await;
    let url = server.url(&format!("prefix={}:", fresh_table()));
    let (a, reader) = (backend(&url).await, backend(&url).await);
    let candidate = Locker::from_arc(a as Arc<dyn LockBackend>);
    let reader = Locker::from_arc(reader as Arc<dyn LockBackend>);
    // The shortest TTL: renewed every 1.33 s, the item living 4 s.
    let leading = candidate
        .election("renewed")
        .campaign_with("v1", opts(Duration::from_secs(4)))
        .await
        .expect("lead");
    leading.proclaim("v2").await.expect("proclaim");
    sleep(Duration::from_secs(6)).await;
    assert_eq!(leading.state(), LockState::Held);
    let seen = reader
        .election("renewed")
        .leader()
        .await
        .expect("read")
        .expect("still leading after the item's first TTL");
    assert_eq!((seen.value.as_str(), seen.term), ("v2", leading.term()));
    assert!(leading.is_leading().await.expect("ask"));
    leading.resign().await.expect("resign");
}

/// The add of a campaign applied but its reply was lost: its item keeps
/// every other candidate out but names no term, so nobody is seen leading
/// (the candidate does not know it leads). The retry finds the item its
/// own, draws a new token and writes it in as the term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_grant_reply_leaves_no_leader_until_the_retry_writes_the_term() {
    let server = Memcached::shared().await;
    let proxy = Proxy::to(server.socket_addr()).await;
    let query = format!("prefix={}:", fresh_table());
    let a = backend(&server.url_via(proxy.port(), &query)).await;
    let b = backend(&server.url(&query)).await;
    let reader = Locker::from_arc(b.clone() as Arc<dyn LockBackend>);
    let name = LockName::new("lost").expect("name");
    let req = AcquireRequest::new(name.clone(), Duration::from_secs(10))
        .with_kind(LockKind::Leader)
        .with_value("retried");

    proxy.set(Fault::DropNextReply);
    let lost = a.try_acquire(&req).await;
    assert!(lost.is_err(), "the reply was lost: {lost:?}");
    assert_eq!(proxy.fault(), Fault::None, "the proxy dropped a reply");
    assert_eq!(reader.election("lost").leader().await.expect("read"), None);
    let holders = b.holders(&name, LockKind::Leader).await.expect("holders");
    assert_eq!(holders.len(), 1, "the add applied: {holders:?}");
    assert_eq!(holders[0].token, None, "no term yet: {holders:?}");
    let other =
        AcquireRequest::new(name.clone(), Duration::from_secs(10)).with_kind(LockKind::Leader);
    assert!(
        b.try_acquire(&other).await.expect("try").is_none(),
        "a second leader"
    );

    let lease = a.try_acquire(&req).await.expect("retry").expect("its own");
    let seen = reader
        .election("lost")
        .leader()
        .await
        .expect("read")
        .expect("a leader once the term is in");
    assert_eq!((seen.value.as_str(), seen.term), ("retried", lease.token()));
    assert!(a.is_held(&lease).await.expect("ask"));
    a.release(&lease).await.expect("release");
    assert_eq!(reader.election("lost").leader().await.expect("read"), None);
}

/// memcached tells of nothing, but a change made through one backend wakes
/// the observers of that backend at once: a watch that would poll once a
/// minute sees the grant, the proclaim and the resign promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_in_the_candidates_process_are_woken_by_its_changes() {
    const PROMPT: Duration = Duration::from_secs(10);
    let server = Memcached::shared().await;
    let b = backend(&server.url(&format!("prefix={}:", fresh_table()))).await;
    let locker = Locker::from_arc(b as Arc<dyn LockBackend>);
    let election = locker.election("woken");
    let mut watch = election.observe().poll_every(Duration::from_secs(60));
    assert_eq!(watch.changed().await.expect("observe"), None);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        loop {
            let change = watch.changed().await.expect("observe");
            if tx.send(change.map(|l| (l.value, l.term))).is_err() {
                return;
            }
        }
    });
    let mut next = async || {
        timeout(PROMPT, rx.recv())
            .await
            .expect("woken well before the next poll")
            .expect("observer alive")
    };
    let leading = election
        .campaign_with("a1", opts(Duration::from_secs(30)))
        .await
        .expect("lead");
    assert_eq!(next().await, Some(("a1".to_owned(), leading.term())));
    leading.proclaim("a2").await.expect("proclaim");
    assert_eq!(next().await, Some(("a2".to_owned(), leading.term())));
    leading.resign().await.expect("resign");
    assert_eq!(next().await, None);
    observer.abort();
}
