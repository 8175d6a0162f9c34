//! The cases. Each takes a [`Target`], panics with a message on the first
//! broken promise, and returns a [`Verdict`].
//!
//! TTLs are short and every wait is bounded, generously: these tests check
//! behaviour, not speed. The multi-process case, which runs the `contender`
//! binary, is in `processes`; the FIFO case for backends that queue waiters
//! on the server, which their own tests call, is in `fifo`.

mod cancel;
mod composite;
mod election;
mod fifo;
mod holders;
mod processes;
mod shared;
mod support;

pub use cancel::cancel_safety;
pub use composite::{
    lock_all_is_lost_when_any_name_is, lock_all_opposite_orders_never_deadlock,
    lock_all_takes_all_or_none, reentrant_holds_renew_and_release_on_the_last_drop,
    reentrant_holds_share_one_grant,
};
pub use election::{
    election_cancelled_campaigns_leave_nothing, election_crashed_leader_is_replaced,
    election_observers_see_every_change_in_order, election_one_leader_among_many_candidates,
    election_proclaim_keeps_the_term, election_rejects_bad_input, election_resign_hands_over,
    election_value_is_read_by_non_candidates,
};
pub use fifo::fifo_one_wake_up_per_release;
pub use holders::holders_are_listed_for_every_kind;
pub use processes::{multi_process, multi_process_semaphore};
pub use shared::{
    a_writer_that_gives_up_lets_readers_in, crashed_permit_returns_after_ttl,
    permits_wake_few_waiters, readers_share_writer_excludes, semaphore_admits_at_most_n,
    shared_leases_renew_and_release_for_the_owner_only, waiting_writer_is_not_starved,
};

use crate::kinds::Kinds;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::backend::OwnerToken;
use lock_core::backend::{AcquireRequest, Lease};
use lock_core::{Error, Fencing, LockKind, LockState, Wait};
use tokio::time::{Instant, sleep, timeout};

use crate::{Target, Verdict};
use support::{
    assert_increasing, assert_not_held, forged, locker, opts, patient, short_ttl, unique,
};

/// Several clients hammer one name; no two critical sections overlap, and
/// (where fencing is strict) tokens grow in the order of the grants.
pub async fn mutual_exclusion(t: &dyn Target) -> Verdict {
    const WORKERS: usize = 6;
    const ROUNDS: usize = 8;
    let name = unique("mutex");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let l = locker(t).await;
        let (name, inside, overlaps, tokens) = (
            name.clone(),
            inside.clone(),
            overlaps.clone(),
            tokens.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let g = l
                    .lock_with(
                        &name,
                        opts(Duration::from_secs(10), Wait::For(Duration::from_secs(120))),
                    )
                    .await
                    .expect("acquire under contention");
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokens.lock().expect("poisoned").push(g.token().get());
                sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("release of a held lock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "critical sections overlapped"
    );
    let tokens = tokens.lock().expect("poisoned").clone();
    assert_eq!(tokens.len(), WORKERS * ROUNDS);
    if locker(t).await.capabilities().fencing == Fencing::Strict {
        assert_increasing(&tokens);
    }
    Verdict::Passed
}

/// A single attempt on a held lock says "held" at once, at every layer.
pub async fn try_acquire_on_held_lock(t: &dyn Target) -> Verdict {
    let name = unique("held");
    let (a, b) = (locker(t).await, locker(t).await);
    let g = a
        .lock_with(&name, opts(Duration::from_secs(10), Wait::No))
        .await
        .expect("free lock");
    assert!(
        b.try_lock(&name).await.is_err_and(|e| e.is_busy()),
        "try_lock on a held lock"
    );
    let req = AcquireRequest::new(
        lock_core::LockName::new(&name).expect("name"),
        Duration::from_secs(10),
    );
    assert!(b.backend().try_acquire(&req).await.unwrap().is_none());
    match b
        .lock_with(&name, opts(Duration::from_secs(10), Wait::No))
        .await
    {
        Err(e @ Error::Busy { .. }) => assert!(e.is_retryable()),
        other => panic!("Wait::No on a held lock: expected Busy, got {other:?}"),
    }
    g.release().await.expect("release");
    let again = b.try_lock(&name).await.expect("free after release");
    again.release().await.expect("release");
    Verdict::Passed
}

/// A bounded wait on a held lock ends with `WaitTimeout` after the budget,
/// not before and not much after; after release the lock is granted.
pub async fn acquire_timeout(t: &dyn Target) -> Verdict {
    let name = unique("timeout");
    let (a, b) = (locker(t).await, locker(t).await);
    let g = a
        .lock_with(&name, opts(Duration::from_secs(20), Wait::No))
        .await
        .expect("free lock");
    let budget = Duration::from_millis(300);
    let started = Instant::now();
    match b
        .lock_with(&name, opts(Duration::from_secs(10), Wait::For(budget)))
        .await
    {
        Err(Error::WaitTimeout { waited, .. }) => {
            assert!(waited >= budget, "gave up early: {waited:?}")
        }
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took >= budget && took < Duration::from_secs(15),
        "waited {took:?} for a {budget:?} budget"
    );
    g.release().await.expect("release");
    let g2 = b
        .lock_with(
            &name,
            opts(Duration::from_secs(10), Wait::For(Duration::from_secs(10))),
        )
        .await
        .expect("granted after release");
    g2.release().await.expect("release");
    Verdict::Passed
}

/// A holder that never renews nor releases (it crashed) loses the lock when
/// its TTL runs out, and a waiter gets it.
pub async fn ttl_expiry_frees_crashed_holder(t: &dyn Target) -> Verdict {
    let name = unique("crash");
    let (a, b) = (locker(t).await, locker(t).await);
    let ttl = short_ttl(&a);
    let crashed = a
        .lease_kind(&name, LockKind::Exclusive, opts(ttl, Wait::No))
        .await
        .expect("free lock");
    let g = b
        .lock_with(&name, opts(Duration::from_secs(10), patient(ttl)))
        .await
        .expect("a waiter gets a crashed holder's lock after its TTL");
    if b.capabilities().fencing != Fencing::None {
        assert!(
            g.token() > crashed.token(),
            "{:?} after {:?}",
            g.token(),
            crashed.token()
        );
    }
    assert_not_held(
        "renew after takeover",
        a.backend().renew(&crashed, ttl).await,
    );
    g.release().await.expect("release");
    Verdict::Passed
}

/// Renewing extends the lease past its first TTL; nobody but the owner can
/// renew.
pub async fn renew_extends_only_for_the_owner(t: &dyn Target) -> Verdict {
    let name = unique("renew");
    let (a, b) = (locker(t).await, locker(t).await);
    let ttl = a.capabilities().min_ttl.max(Duration::from_secs(1));
    let lease = a
        .lease_kind(&name, LockKind::Exclusive, opts(ttl, Wait::No))
        .await
        .expect("free lock");
    // Past half the lease, counted as the lease counts it: a backend whose
    // server expires early (memcached's one-second clock) grants less than
    // the TTL.
    sleep(lease.remaining().mul_f64(0.6)).await;
    let renewed = a.backend().renew(&lease, ttl).await.expect("owner renews");
    assert!(renewed.deadline() > lease.deadline());
    assert_eq!(
        renewed.token(),
        lease.token(),
        "renewal keeps the fencing token"
    );
    sleep(renewed.remaining().mul_f64(0.6)).await;
    assert!(
        b.try_lock(&name).await.is_err_and(|e| e.is_busy()),
        "still held past the first lease thanks to the renewal"
    );
    let forged = forged(&lease);
    assert_not_held(
        "renew by a non-owner",
        b.backend().renew(&forged, ttl).await,
    );
    a.backend().release(&renewed).await.expect("owner releases");
    assert_not_held(
        "renew after release",
        a.backend().renew(&renewed, ttl).await,
    );
    Verdict::Passed
}

/// `LockGuard::extend` renews at once, with ownership checked on the server:
/// the token stays, the deadline does not move back, and a lock gone from
/// the server is `NotHeld` and lost.
pub async fn extend_renews_now_for_the_owner(t: &dyn Target) -> Verdict {
    let name = unique("extend");
    let (a, b) = (locker(t).await, locker(t).await);
    let ttl = short_ttl(&a);
    let guard = a
        .lock_with(&name, opts(ttl, Wait::No))
        .await
        .expect("free lock");
    let before = guard.lease();
    let longer = (ttl * 3).min(a.capabilities().max_ttl);
    let extended = guard.extend(longer).await.expect("the holder extends");
    assert_eq!(extended.token(), before.token(), "extend keeps the token");
    assert!(extended.deadline() >= before.deadline());
    assert_eq!(guard.lease().deadline(), extended.deadline());
    assert_eq!(guard.state(), LockState::Held);
    assert!(
        b.try_lock(&name).await.is_err_and(|e| e.is_busy()),
        "still held after the extension"
    );
    // Gone from the server behind the guard's back.
    a.backend()
        .release(&guard.lease())
        .await
        .expect("release behind the guard's back");
    assert_not_held("extend of a lock gone", guard.extend(longer).await);
    assert_eq!(guard.state(), LockState::Lost);
    let taken = b.try_lock(&name).await;
    assert!(taken.is_ok(), "the name is free once released: {taken:?}");
    Verdict::Passed
}

/// `is_held` asks the server, and only reads: true for the holder's lease,
/// false for a stranger's, for one that ran out while another owner took
/// the name, and for one released behind its guard's back (which makes
/// the guard lost).
pub async fn is_held_asks_the_server(t: &dyn Target) -> Verdict {
    let name = unique("is-held");
    let (a, b) = (locker(t).await, locker(t).await);
    let ttl = short_ttl(&a);
    let stale = a
        .lease_kind(&name, LockKind::Exclusive, opts(ttl, Wait::No))
        .await
        .expect("free lock");
    let asks = |r: lock_core::Result<bool>| r.expect("is_held answers");
    assert!(
        asks(a.backend().is_held(&stale).await),
        "the holder's lease"
    );
    let forged = forged(&stale);
    assert!(
        !asks(b.backend().is_held(&forged).await),
        "a stranger's lease"
    );
    // Asking did not extend the lease: it runs out on time.
    let current = b
        .lock_with(&name, opts(Duration::from_secs(10), patient(ttl)))
        .await
        .expect("granted after the first lease ran out");
    assert!(!asks(a.backend().is_held(&stale).await), "a lease run out");
    assert!(asks(current.is_held().await), "the new holder's guard");
    assert_eq!(current.state(), LockState::Held);
    b.backend()
        .release(&current.lease())
        .await
        .expect("release behind the guard's back");
    assert!(!asks(current.is_held().await), "a guard whose lock is gone");
    assert_eq!(current.state(), LockState::Lost);
    Verdict::Passed
}

/// Neither a stranger nor a stale holder can release the current holder's
/// lock; both are told so.
pub async fn non_owner_release_never_deletes(t: &dyn Target) -> Verdict {
    let name = unique("release");
    let (a, b, c) = (locker(t).await, locker(t).await, locker(t).await);
    let ttl = short_ttl(&a);
    let stale = a
        .lease_kind(&name, LockKind::Exclusive, opts(ttl, Wait::No))
        .await
        .expect("free lock");
    let current = b
        .lock_with(&name, opts(Duration::from_secs(10), patient(ttl)))
        .await
        .expect("granted after the first lease ran out");
    assert_not_held(
        "release by the stale holder",
        a.backend().release(&stale).await,
    );
    let forged = Lease::new(
        stale.name().clone(),
        OwnerToken::random(),
        current.token(),
        ttl,
        Instant::now(),
    );
    assert_not_held("release by a stranger", c.backend().release(&forged).await);
    assert!(
        c.try_lock(&name).await.is_err_and(|e| e.is_busy()),
        "the holder's lock survived"
    );
    assert_eq!(current.state(), LockState::Held);
    current.release().await.expect("the real holder releases");
    Verdict::Passed
}

/// Tokens grow across holders, clients, releases and expiry.
pub async fn fencing_tokens_strictly_increase(t: &dyn Target) -> Verdict {
    let (a, b) = (locker(t).await, locker(t).await);
    if a.capabilities().fencing == Fencing::None {
        return Verdict::NotApplicable("the backend declares Fencing::None".into());
    }
    let name = unique("fence");
    let mut tokens = Vec::new();
    for i in 0..10 {
        let l = if i % 2 == 0 { &a } else { &b };
        let g = l
            .lock_with(
                &name,
                opts(Duration::from_secs(10), Wait::For(Duration::from_secs(10))),
            )
            .await
            .expect("free lock");
        tokens.push(g.token().get());
        g.release().await.expect("release");
    }
    let ttl = short_ttl(&a);
    let expired = a
        .lease_kind(&name, LockKind::Exclusive, opts(ttl, Wait::No))
        .await
        .expect("free lock");
    tokens.push(expired.token().get());
    let after = b
        .lock_with(&name, opts(Duration::from_secs(10), patient(ttl)))
        .await
        .expect("after expiry");
    tokens.push(after.token().get());
    after.release().await.expect("release");
    assert_increasing(&tokens);
    Verdict::Passed
}

/// When the lock is taken away behind the holder's back, the guard's renewal
/// notices and the lost signal fires.
pub async fn lost_signal_fires(t: &dyn Target) -> Verdict {
    let name = unique("lost");
    let (a, b) = (locker(t).await, locker(t).await);
    let ttl = a.capabilities().min_ttl.max(Duration::from_millis(600));
    let g = a
        .lock_with(&name, opts(ttl, Wait::No))
        .await
        .expect("free lock");
    let handle = g.handle();
    assert_eq!(handle.state(), LockState::Held);
    // Somebody with the owner token (an operator, a buggy peer) deletes it.
    b.backend()
        .release(&g.lease())
        .await
        .expect("release with the owner token");
    timeout(ttl * 3 + Duration::from_secs(5), handle.lost())
        .await
        .expect("the lost signal fires within a few renewal periods");
    assert_eq!(handle.state(), LockState::Lost);
    assert!(handle.lost_token().is_cancelled());
    match g.release().await {
        Err(Error::Lost { .. }) => {}
        other => panic!("release of a lost lock: expected Lost, got {other:?}"),
    }
    Verdict::Passed
}

/// Bad names and TTLs are refused with clear errors, and nothing is written.
pub async fn bad_input_rejected(t: &dyn Target) -> Verdict {
    let l = locker(t).await;
    let too_long = "n".repeat(lock_core::LockName::MAX_LEN + 1);
    for bad in ["", "a/b", "has space", too_long.as_str(), "-x"] {
        match l.try_lock(bad).await {
            Err(e @ Error::InvalidName { .. }) => {
                assert!(!e.is_retryable() && e.is_invalid_input())
            }
            other => panic!("name {bad:?}: expected InvalidName, got {other:?}"),
        }
        assert!(matches!(
            l.holder(bad).await,
            Err(Error::InvalidName { .. })
        ));
    }
    let name = unique("input");
    let caps = l.capabilities();
    for ttl in [
        Duration::ZERO,
        caps.max_ttl + Duration::from_secs(1),
        Duration::MAX,
    ] {
        match l.lock_with(&name, opts(ttl, Wait::No)).await {
            Err(Error::InvalidTtl { .. }) => {}
            other => panic!("ttl {ttl:?}: expected InvalidTtl, got {other:?}"),
        }
    }
    // An absurd wait is "forever", not an overflow.
    let g = l
        .lock_with(
            &name,
            opts(Duration::from_secs(10), Wait::For(Duration::MAX)),
        )
        .await
        .expect("a free lock with an endless wait");
    g.release().await.expect("release");
    Verdict::Passed
}
