//! Holds built on the lock in the library, the same on every backend:
//! reentrant holds of one grant, and several names taken all or none.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{AcquireOptions, Error, LockKind, LockState, Wait};
use tokio::time::timeout;

use super::support::{locker, opts, patient, short_ttl, unique};
use crate::{Target, Verdict};

fn reentrant(ttl: Duration, wait: Wait) -> AcquireOptions {
    opts(ttl, wait).reentrant(true)
}

/// A task that holds a lock and asks again, reentrant, gets a second guard
/// of the same grant; the lock stays held until the last guard lets go.
/// Not reentrant, it gets `AlreadyHeld`; another task still waits.
pub async fn reentrant_holds_share_one_grant(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    let name = unique("reentrant");
    let ttl = Duration::from_secs(10);
    let first = a
        .lock_with(&name, reentrant(ttl, Wait::No))
        .await
        .expect("a free lock");
    let second = a
        .lock_with(&name, reentrant(ttl, Wait::For(Duration::from_secs(5))))
        .await
        .expect("the holder takes its own lock again");
    assert_eq!(second.token(), first.token(), "one grant, one token");
    assert_eq!(second.holds(), 2);
    match a.lock_with(&name, opts(ttl, patient(ttl))).await {
        Err(Error::AlreadyHeld { .. }) => {}
        other => panic!("a second lock that is not reentrant: {other:?}"),
    }
    let other_task = {
        let (a, name) = (a.clone(), name.clone());
        tokio::spawn(async move { a.lock_with(&name, reentrant(ttl, Wait::No)).await })
    };
    match other_task.await.expect("task") {
        Err(e) if e.is_busy() => {}
        other => panic!("another task of the same locker shared the hold: {other:?}"),
    }
    first.release().await.expect("the first release");
    assert_eq!(second.holds(), 1);
    assert!(
        b.try_lock(&name).await.is_err_and(|e| e.is_busy()),
        "released at the first of two holds"
    );
    assert!(second.is_held().await.expect("is_held"));
    second.release().await.expect("the last release");
    b.lock_with(&name, opts(ttl, patient(ttl)))
        .await
        .expect("free after the last release")
        .release()
        .await
        .expect("release");
    Verdict::Passed
}

/// Reentrant holds share the lease: it is renewed while any guard lives,
/// past several TTLs, and dropping the guards (last one included) releases
/// the lock without a call to `release`.
pub async fn reentrant_holds_renew_and_release_on_the_last_drop(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    let name = unique("reentrant-drop");
    let ttl = short_ttl(&a);
    let first = a
        .lock_with(&name, reentrant(ttl, Wait::No))
        .await
        .expect("a free lock");
    let second = a
        .lock_with(&name, reentrant(ttl, Wait::No))
        .await
        .expect("again");
    drop(first);
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(second.state(), LockState::Held, "renewed after a hold went");
    assert!(second.is_held().await.expect("is_held"));
    assert!(
        b.try_lock(&name).await.is_err_and(|e| e.is_busy()),
        "taken over while a hold remained"
    );
    drop(second);
    b.lock_with(&name, opts(ttl, patient(ttl)))
        .await
        .expect("free once the last hold was dropped")
        .release()
        .await
        .expect("release");
    if a.capabilities().supports(LockKind::Write) {
        let rw = a.rwlock(&name);
        let write = rw
            .write_with(reentrant(Duration::from_secs(10), Wait::No))
            .await
            .expect("a free write lock");
        let read = rw
            .read_with(reentrant(Duration::from_secs(10), Wait::No))
            .await
            .expect("the writer reads under its own write");
        assert_eq!(read.token(), write.token());
        assert_eq!(read.kind(), LockKind::Write, "the read shares the write");
        read.release().await.expect("release");
        write.release().await.expect("release");
    }
    Verdict::Passed
}

/// Several names all or none: with one of them held elsewhere, no name is
/// left taken; once it is free, all are taken, each with its own token.
pub async fn lock_all_takes_all_or_none(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    let base = unique("all");
    let names = [
        format!("{base}-c"),
        format!("{base}-a"),
        format!("{base}-b"),
    ];
    let ttl = Duration::from_secs(10);
    let blocker = b
        .lock_with(&names[2], opts(ttl, Wait::No))
        .await
        .expect("a free lock");
    let all = a.multi_lock(names.iter().cloned());
    match all
        .lock_with(opts(ttl, Wait::For(Duration::from_millis(300))))
        .await
    {
        Err(e) if e.is_contention() => {}
        other => panic!("lock_all with one name held: {other:?}"),
    }
    match all.try_lock().await {
        Err(e) if e.is_busy() => {}
        other => panic!("try of lock_all with one name held: {other:?}"),
    }
    for name in [&names[0], &names[1]] {
        b.try_lock(name)
            .await
            .unwrap_or_else(|e| panic!("{name} left held by a failed lock_all: {e}"))
            .release()
            .await
            .expect("release");
    }
    blocker.release().await.expect("release");
    let held = all.lock().await.expect("all free");
    assert_eq!(held.guards().len(), 3);
    let mut order = names.to_vec();
    order.sort();
    let taken: Vec<String> = held.guards().iter().map(|g| g.name().to_string()).collect();
    assert_eq!(taken, order, "taken in one global order");
    for name in &names {
        assert!(
            b.try_lock(name).await.is_err_and(|e| e.is_busy()),
            "{name} free while lock_all holds it"
        );
    }
    assert_eq!(held.state(), LockState::Held);
    held.release().await.expect("release all");
    for name in &names {
        b.try_lock(name)
            .await
            .unwrap_or_else(|e| panic!("{name} still held after the release: {e}"))
            .release()
            .await
            .expect("release");
    }
    Verdict::Passed
}

/// Two clients take `[a, b]` and `[b, a]` over and over: one global order
/// means neither ever holds one name while waiting for the other's, so
/// both finish, and never inside together.
pub async fn lock_all_opposite_orders_never_deadlock(t: &dyn Target) -> Verdict {
    const ROUNDS: usize = 8;
    let base = unique("crossed");
    let (a, b) = (format!("{base}-a"), format!("{base}-b"));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for names in [[a.clone(), b.clone()], [b, a]] {
        let (l, inside) = (locker(t).await, inside.clone());
        clients.push(tokio::spawn(async move {
            let both = l.multi_lock(names);
            for _ in 0..ROUNDS {
                let held = both
                    .lock_with(opts(
                        Duration::from_secs(10),
                        Wait::For(Duration::from_secs(60)),
                    ))
                    .await
                    .expect("both names");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                held.release().await.expect("release");
            }
        }));
    }
    for client in clients {
        timeout(Duration::from_secs(120), client)
            .await
            .expect("[a, b] and [b, a] deadlocked")
            .expect("client");
    }
    Verdict::Passed
}

/// A multi-lock is lost when any of its names is: a name released behind
/// its back makes the whole hold `Lost`, and `lost()` says which.
pub async fn lock_all_is_lost_when_any_name_is(t: &dyn Target) -> Verdict {
    let a = locker(t).await;
    let base = unique("all-lost");
    let held = a
        .multi_lock([format!("{base}-1"), format!("{base}-2")])
        .lock_with(opts(Duration::from_secs(10), Wait::No))
        .await
        .expect("free names");
    let gone = &held.guards()[1];
    a.backend()
        .release(&gone.lease())
        .await
        .expect("release behind the guard's back");
    assert!(!gone.is_held().await.expect("is_held"));
    assert!(held.is_lost());
    assert_eq!(held.state(), LockState::Lost);
    let which = timeout(Duration::from_secs(5), held.lost())
        .await
        .expect("lost() completes");
    assert_eq!(which, gone.name().to_string());
    match held.release().await {
        Err(e) if e.is_lost() => {}
        other => panic!("release of a partly lost multi-lock: {other:?}"),
    }
    Verdict::Passed
}
