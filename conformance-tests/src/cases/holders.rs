//! Who holds what, for every kind of lock: what `distlock status` shows.

use std::time::Duration;

use lock_core::{Error, FencingToken, Holder, LockGuard, LockKind, Wait};

use super::support::{locker, opts, unique};
use crate::{Target, Verdict};

/// The holders a backend lists are the guards held: as many, of the kind
/// held, with their tokens where the backend reads tokens back.
fn assert_listed(what: &str, holders: &[Holder], guards: &[&LockGuard]) {
    assert_eq!(holders.len(), guards.len(), "{what}: {holders:?}");
    let mut listed: Vec<Option<FencingToken>> = holders.iter().map(|h| h.token).collect();
    let mut held: Vec<Option<FencingToken>> = guards.iter().map(|g| Some(g.token())).collect();
    if listed.iter().all(Option::is_some) {
        listed.sort();
        held.sort();
        assert_eq!(listed, held, "{what}: the holders' tokens");
    }
    for (h, kind) in holders.iter().zip(guards.iter().map(|g| g.kind())) {
        if !matches!(kind, LockKind::Read | LockKind::Write) {
            assert_eq!(h.kind, kind, "{what}: {h:?}");
        }
    }
}

/// The mutex's holder, a semaphore's permit holders and a read-write
/// lock's readers or writer are listed while held, and nobody once free.
pub async fn holders_are_listed_for_every_kind(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    let name = unique("holders");
    let ttl = opts(Duration::from_secs(10), Wait::No);
    let mutex = a.lock_with(&name, ttl).await.expect("a free lock");
    let holder = b.holder(&name).await.expect("holder");
    let listed: Vec<Holder> = holder.into_iter().collect();
    assert_listed("the mutex", &listed, &[&mutex]);
    mutex.release().await.expect("release");
    assert!(
        b.holder(&name).await.expect("holder").is_none(),
        "a free lock has no holder"
    );

    let caps = a.capabilities();
    if caps.supports(LockKind::permit(3)) {
        let pool = a.semaphore(&name, 3);
        let (p1, p2) = (
            pool.acquire_with(ttl).await.expect("a permit"),
            pool.acquire_with(ttl).await.expect("a permit"),
        );
        let holders = b.semaphore(&name, 3).holders().await.expect("holders");
        assert_listed("the semaphore", &holders, &[&p1, &p2]);
        assert!(holders.iter().all(|h| h.kind == LockKind::permit(3)));
        p1.release().await.expect("release");
        p2.release().await.expect("release");
        let holders = b.semaphore(&name, 3).holders().await.expect("holders");
        assert!(holders.is_empty(), "a free semaphore: {holders:?}");
    }
    if caps.supports(LockKind::Read) {
        let rw = a.rwlock(&name);
        let listed = match b.rwlock(&name).holders().await {
            Err(Error::Unsupported { .. }) if caps.backend == "redlock" => {
                return Verdict::Passed;
            }
            other => other.expect("holders"),
        };
        assert!(listed.is_empty(), "a free read-write lock: {listed:?}");
        let (r1, r2) = (
            rw.read_with(ttl).await.expect("a read lock"),
            b.rwlock(&name).read_with(ttl).await.expect("readers share"),
        );
        let holders = b.rwlock(&name).holders().await.expect("holders");
        assert_listed("the readers", &holders, &[&r1, &r2]);
        assert!(
            holders.iter().all(|h| h.kind == LockKind::Read),
            "{holders:?}"
        );
        r1.release().await.expect("release");
        r2.release().await.expect("release");
        let w = rw.write_with(ttl).await.expect("a write lock");
        let holders = b.rwlock(&name).holders().await.expect("holders");
        assert_listed("the writer", &holders, &[&w]);
        assert_eq!(holders[0].kind, LockKind::Write);
        w.release().await.expect("release");
    }
    Verdict::Passed
}
