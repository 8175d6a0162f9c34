//! The cases of semaphores and read-write locks. Each runs on a backend that
//! declares the family in its [`Capabilities`](lock_core::Capabilities);
//! on one that does not, it checks that asking fails with
//! [`Error::Unsupported`] before any I/O, and says so.

use crate::kinds::Kinds;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Error, Fencing, LockKind, Locker, Wait};
use tokio::time::{sleep, timeout};

use super::support::{
    assert_increasing, assert_not_held, forged, locker, opts, patient, short_ttl, unique,
};
use crate::{Target, Verdict};

/// `None` if the backend keeps `kind`'s family; otherwise checks that an
/// acquire fails with `Unsupported` and returns the verdict saying so.
async fn unsupported(l: &Locker, kind: LockKind) -> Option<Verdict> {
    let caps = l.capabilities();
    if caps.supports(kind) {
        return None;
    }
    let asked = l
        .lock_kind(
            unique("unsupported"),
            kind,
            opts(caps.min_ttl.max(Duration::from_secs(1)), Wait::No),
        )
        .await;
    match asked {
        Err(Error::Unsupported { operation, .. }) => {
            assert_eq!(operation, kind.family().operation());
        }
        other => panic!(
            "{} declares no {}, yet asking gave {other:?}",
            caps.backend,
            kind.family().operation()
        ),
    }
    Some(Verdict::NotApplicable(format!(
        "{} keeps no {} (checked: asking fails with Unsupported)",
        caps.backend,
        kind.family().operation()
    )))
}

fn ten_seconds(wait: Wait) -> lock_core::AcquireOptions {
    opts(Duration::from_secs(10), wait)
}

/// Many clients take permits of one semaphore in a loop: never more than
/// `N` inside at once, all `N` in use at some point, and every grant's
/// token different (strictly increasing per client where fencing is
/// strict).
pub async fn semaphore_admits_at_most_n(t: &dyn Target) -> Verdict {
    const PERMITS: u32 = 3;
    const WORKERS: usize = 8;
    const ROUNDS: usize = 5;
    let kind = LockKind::permit(PERMITS);
    if let Some(v) = unsupported(&locker(t).await, kind).await {
        return v;
    }
    let name = unique("sem");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Every client connects before any starts: a backend slow to connect
    // would otherwise let each one run its rounds alone.
    let mut lockers = Vec::new();
    for _ in 0..WORKERS {
        lockers.push(locker(t).await);
    }
    let mut tasks = Vec::new();
    for l in lockers {
        let (name, inside, most, tokens) =
            (name.clone(), inside.clone(), most.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..ROUNDS {
                let g = l
                    .lock_kind(
                        &name,
                        kind,
                        ten_seconds(Wait::For(Duration::from_secs(120))),
                    )
                    .await
                    .expect("a permit under contention");
                assert_eq!(g.kind(), kind);
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                mine.push(g.token().get());
                sleep(Duration::from_millis(15)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("release of a held permit");
            }
            tokens.lock().expect("poisoned").push(mine);
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS as usize,
        "{most} holders of {PERMITS} permits at once"
    );
    assert!(
        most >= 2,
        "permits were never shared: at most {most} inside at once"
    );
    let per_client = tokens.lock().expect("poisoned").clone();
    let mut all: Vec<u64> = per_client.iter().flatten().copied().collect();
    assert_eq!(all.len(), WORKERS * ROUNDS);
    if locker(t).await.capabilities().fencing != Fencing::None {
        all.sort_unstable();
        all.dedup();
        assert_eq!(
            all.len(),
            WORKERS * ROUNDS,
            "two grants shared a fencing token"
        );
    }
    if locker(t).await.capabilities().fencing == Fencing::Strict {
        for mine in &per_client {
            assert_increasing(mine);
        }
    }
    Verdict::Passed
}

/// Permits held by a client that crashed (never renewed nor released) come
/// back when their TTL runs out; until then the semaphore is full.
pub async fn crashed_permit_returns_after_ttl(t: &dyn Target) -> Verdict {
    const PERMITS: u32 = 2;
    let kind = LockKind::permit(PERMITS);
    let (a, b) = (locker(t).await, locker(t).await);
    if let Some(v) = unsupported(&a, kind).await {
        return v;
    }
    let name = unique("sem-crash");
    let ttl = short_ttl(&a);
    let mut crashed = Vec::new();
    for _ in 0..PERMITS {
        crashed.push(
            a.lease_kind(&name, kind, opts(ttl, Wait::No))
                .await
                .expect("a free permit"),
        );
    }
    assert!(
        b.semaphore(&name, PERMITS)
            .try_acquire()
            .await
            .is_err_and(|e| e.is_busy()),
        "a full semaphore granted one more permit"
    );
    let g = b
        .lock_kind(&name, kind, opts(Duration::from_secs(10), patient(ttl)))
        .await
        .expect("a crashed holder's permit comes back after its TTL");
    if b.capabilities().fencing == Fencing::Strict {
        let newest = crashed.iter().map(|l| l.token()).max().expect("two");
        assert!(g.token() > newest, "{:?} after {newest:?}", g.token());
    }
    g.release().await.expect("release");
    Verdict::Passed
}

/// Readers share the lock; a writer excludes readers and writers; each side
/// gets in once the other is gone; renewals and releases are the owner's
/// only; and tokens grow with every grant where fencing is strict.
pub async fn readers_share_writer_excludes(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    if let Some(v) = unsupported(&a, LockKind::Read).await {
        return v;
    }
    let name = unique("rw");
    let read = ten_seconds(Wait::No);
    let write = ten_seconds(Wait::No);
    let r1 = a
        .lock_kind(&name, LockKind::Read, read)
        .await
        .expect("a free read lock");
    let r2 = b
        .lock_kind(&name, LockKind::Read, read)
        .await
        .expect("readers share");
    assert!(
        b.rwlock(&name)
            .try_write()
            .await
            .is_err_and(|e| e.is_busy()),
        "a writer got in beside readers"
    );
    assert!(
        b.try_lock(&name).await.is_ok(),
        "the mutex of the same name is another lock"
    );
    assert!(r1.is_held().await.expect("is_held"));
    let lease = r1.lease();
    assert_not_held(
        "releasing a reader's lease with another owner",
        b.backend().release(&forged(&lease)).await,
    );
    r1.release().await.expect("release");
    assert!(
        b.rwlock(&name)
            .try_write()
            .await
            .is_err_and(|e| e.is_busy()),
        "a writer got in beside a reader"
    );
    r2.release().await.expect("release");
    let w = a
        .lock_kind(&name, LockKind::Write, write)
        .await
        .expect("a writer gets in once readers are gone");
    assert!(
        b.rwlock(&name).try_read().await.is_err_and(|e| e.is_busy()),
        "a reader got in beside a writer"
    );
    assert!(
        b.rwlock(&name)
            .try_write()
            .await
            .is_err_and(|e| e.is_busy()),
        "two writers"
    );
    let waiter = {
        let b = b.clone();
        let name = name.clone();
        tokio::spawn(async move {
            b.lock_kind(
                &name,
                LockKind::Read,
                ten_seconds(Wait::For(Duration::from_secs(30))),
            )
            .await
        })
    };
    sleep(Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "a reader got in while the writer held"
    );
    let written = w.lease();
    w.release().await.expect("release");
    let r3 = timeout(Duration::from_secs(30), waiter)
        .await
        .expect("a waiting reader gets in after the writer")
        .expect("task")
        .expect("read lock");
    if a.capabilities().fencing == Fencing::Strict {
        let tokens: Vec<u64> = [&lease, &written, &r3.lease()]
            .iter()
            .map(|l| l.token().get())
            .collect();
        // r2 was granted between r1 and w.
        assert_increasing(&tokens);
    }
    r3.release().await.expect("release");
    Verdict::Passed
}

/// A writer waiting for readers to leave is not starved: readers arriving
/// after it wait behind it, and it gets in as soon as the old readers go.
pub async fn waiting_writer_is_not_starved(t: &dyn Target) -> Verdict {
    let (a, b, c) = (locker(t).await, locker(t).await, locker(t).await);
    if let Some(v) = unsupported(&a, LockKind::Read).await {
        return v;
    }
    let name = unique("rw-starve");
    let r1 = a
        .lock_kind(&name, LockKind::Read, ten_seconds(Wait::No))
        .await
        .expect("a free read lock");
    // The writer's TTL is short, shorter than some backends' pause
    // between a waiter's attempts: its mark must outlast the pause anyway.
    let writer_ttl = b.capabilities().min_ttl.max(Duration::from_millis(150));
    let writer = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move {
            let wait = Wait::For(Duration::from_secs(60));
            b.lock_kind(&name, LockKind::Write, opts(writer_ttl, wait))
                .await
        })
    };
    // Once the writer is queued, no new reader gets in. Readers keep
    // arriving (each gives up at once) while the first one holds: before
    // the writer queues some may get in; from the first refusal on, every
    // one is refused, for a second.
    let mut refused_since = None;
    for _ in 0..200 {
        let asked = c
            .lock_kind(&name, LockKind::Read, ten_seconds(Wait::No))
            .await;
        match (asked, refused_since) {
            (Ok(g), None) => g.release().await.expect("release"),
            (Ok(_), Some(since)) => panic!(
                "a reader got in {:?} after readers were first refused for a waiting writer",
                tokio::time::Instant::elapsed(&since)
            ),
            (Err(Error::Busy { .. }), None) => refused_since = Some(tokio::time::Instant::now()),
            (Err(Error::Busy { .. }), Some(since)) if since.elapsed() > Duration::from_secs(1) => {
                break;
            }
            (Err(Error::Busy { .. }), Some(_)) => {}
            (Err(e), _) => panic!("a reader's attempt failed: {e}"),
        }
        sleep(Duration::from_millis(25)).await;
    }
    assert!(
        refused_since.is_some_and(|s| s.elapsed() > Duration::from_secs(1)),
        "arriving readers kept getting in while a writer waited"
    );
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    r1.release().await.expect("release");
    let w = timeout(Duration::from_secs(60), writer)
        .await
        .expect("the writer gets in once the old reader leaves")
        .expect("task")
        .expect("write lock");
    assert_eq!(w.kind(), LockKind::Write);
    // Its short lease may have run out by now on a busy machine.
    let _ = w.release().await;
    let r = c
        .lock_kind(
            &name,
            LockKind::Read,
            ten_seconds(Wait::For(Duration::from_secs(30))),
        )
        .await
        .expect("readers get in again after the writer");
    r.release().await.expect("release");
    Verdict::Passed
}

/// A writer that gives up waiting does not keep readers out.
pub async fn a_writer_that_gives_up_lets_readers_in(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    if let Some(v) = unsupported(&a, LockKind::Read).await {
        return v;
    }
    let name = unique("rw-giveup");
    let r1 = a
        .lock_kind(&name, LockKind::Read, ten_seconds(Wait::No))
        .await
        .expect("a free read lock");
    match b
        .lock_kind(
            &name,
            LockKind::Write,
            ten_seconds(Wait::For(Duration::from_millis(300))),
        )
        .await
    {
        Err(Error::WaitTimeout { .. }) => {}
        other => panic!("a writer behind a reader: expected WaitTimeout, got {other:?}"),
    }
    let r2 = b
        .lock_kind(
            &name,
            LockKind::Read,
            ten_seconds(Wait::For(Duration::from_secs(5))),
        )
        .await
        .expect("a reader gets in once the writer gave up (well before its 10 s TTL)");
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    Verdict::Passed
}

/// On a backend whose server wakes waiters, a release wakes about one of
/// them, not all: the waiters of a full semaphore share one client, and the
/// wake-ups it counts stay within two per release.
pub async fn permits_wake_few_waiters(t: &dyn Target) -> Verdict {
    const PERMITS: u32 = 2;
    const WAITERS: usize = 6;
    let kind = LockKind::permit(PERMITS);
    let l = locker(t).await;
    if let Some(v) = unsupported(&l, kind).await {
        return v;
    }
    if !l.capabilities().server_side_wait {
        return Verdict::NotApplicable("waiters poll: no server wake-ups to count".into());
    }
    let name = unique("sem-herd");
    let holder = locker(t).await;
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(
            holder
                .lock_kind(&name, kind, ten_seconds(Wait::No))
                .await
                .expect("a free permit"),
        );
    }
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let (l, name) = (l.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let g = l
                .lock_kind(&name, kind, ten_seconds(Wait::For(Duration::from_secs(60))))
                .await
                .expect("a permit in turn");
            sleep(Duration::from_millis(30)).await;
            g.release().await.expect("release");
        }));
    }
    sleep(Duration::from_millis(500)).await;
    let before = l.stats().wakeups;
    for g in held {
        g.release().await.expect("release");
    }
    for task in tasks {
        timeout(Duration::from_secs(90), task)
            .await
            .expect("waiters finish")
            .expect("waiter");
    }
    let releases = PERMITS as u64 + WAITERS as u64;
    let woken = l.stats().wakeups - before;
    assert!(
        woken <= 2 * releases,
        "{woken} wake-ups for {releases} releases: a herd"
    );
    Verdict::Passed
}

/// A permit's and each side's lease is renewed past its first TTL by its
/// owner, checked on the server, and released once: a stranger can neither
/// renew nor release it, and after the release it is no longer held.
pub async fn shared_leases_renew_and_release_for_the_owner_only(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    let caps = a.capabilities();
    let kinds: Vec<LockKind> = [LockKind::permit(2), LockKind::Read, LockKind::Write]
        .into_iter()
        .filter(|k| caps.supports(*k))
        .collect();
    if kinds.is_empty() {
        return unsupported(&a, LockKind::Read)
            .await
            .expect("neither family is kept");
    }
    let ttl = caps.min_ttl.max(Duration::from_secs(1));
    for kind in kinds {
        let name = unique("shared-renew");
        let lease = a
            .lease_kind(&name, kind, opts(ttl, Wait::No))
            .await
            .expect("free");
        assert_eq!(lease.kind(), kind);
        // Renewed past half the lease, then checked past its first
        // deadline, each counted as the lease counts it (etcd and
        // ZooKeeper renew for their session's TTL, memcached expires up to
        // two seconds early).
        sleep(lease.remaining().mul_f64(0.6)).await;
        let renewed = a
            .backend()
            .renew(&lease, ttl)
            .await
            .unwrap_or_else(|e| panic!("{kind}: the owner renews: {e}"));
        assert_eq!(renewed.kind(), kind, "a renewal keeps the kind");
        assert_eq!(renewed.token(), lease.token(), "a renewal keeps the token");
        assert!(renewed.deadline() > lease.deadline());
        assert_not_held(
            "renew by a stranger",
            b.backend().renew(&forged(&lease), ttl).await,
        );
        sleep(renewed.remaining().mul_f64(0.6)).await;
        assert!(
            a.backend().is_held(&renewed).await.expect("is_held"),
            "{kind}: held past its first lease thanks to the renewal"
        );
        let again = a
            .backend()
            .renew(&renewed, ttl)
            .await
            .unwrap_or_else(|e| panic!("{kind}: a second renewal: {e}"));
        assert_not_held(
            "release by a stranger",
            b.backend().release(&forged(&again)).await,
        );
        a.backend()
            .release(&again)
            .await
            .expect("the owner releases");
        assert!(
            !a.backend().is_held(&again).await.expect("is_held"),
            "{kind}: held after its release"
        );
        assert_not_held("a second release", a.backend().release(&again).await);
        assert_not_held("renew after release", a.backend().renew(&again, ttl).await);
    }
    Verdict::Passed
}
