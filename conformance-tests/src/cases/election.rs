//! Leader election: one leader at a time, terms that fence, the value
//! read by anybody, hand-over on resign and on a leader's crash, proclaims
//! that keep the term, observers that see every change in order, and
//! campaigns cancelled at any point that leave nothing behind.
//!
//! Every backend keeps elections: a case fails on one that says it does
//! not.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Error, Fencing, Leader, LeaderGuard, LockKind, Locker, Wait};
use rand::Rng;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

use super::support::{assert_not_held, forged, locker, opts, patient, short_ttl, unique};
use crate::kinds::Kinds;
use crate::{Target, Verdict};

/// A generous bound on anything that should take a round trip or a poll.
const PROMPT: Duration = Duration::from_secs(15);

async fn candidate(t: &dyn Target) -> Locker {
    let l = locker(t).await;
    let caps = l.capabilities();
    assert!(
        caps.supports(LockKind::Leader),
        "{} keeps no elections: every backend must",
        caps.backend
    );
    l
}

fn ten_seconds(wait: Wait) -> lock_core::AcquireOptions {
    opts(Duration::from_secs(10), wait)
}

/// Whether terms must grow with every new leader on this backend.
fn ordered_terms(l: &Locker) -> bool {
    l.capabilities().fencing != Fencing::None
}

/// Reads the leader until `wanted` holds of it, within [`PROMPT`].
async fn leader_until(
    l: &Locker,
    name: &str,
    what: &str,
    wanted: impl Fn(&Option<Leader>) -> bool,
) -> Option<Leader> {
    let deadline = Instant::now() + PROMPT;
    loop {
        let now = l.election(name).leader().await.expect("read the leader");
        if wanted(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {now:?} after {PROMPT:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Many candidates on few names: never two leaders of one name at once,
/// and on backends that fence, each new leader's term is greater.
pub async fn election_one_leader_among_many_candidates(t: &dyn Target) -> Verdict {
    const CANDIDATES: usize = 6;
    const TERMS: usize = 4;
    let name = unique("elect-many");
    let leading = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..CANDIDATES {
        let l = candidate(t).await;
        let (name, leading, overlaps, terms) = (
            name.clone(),
            leading.clone(),
            overlaps.clone(),
            terms.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for term in 0..TERMS {
                let g = l
                    .election(&name)
                    .campaign_with(
                        format!("candidate-{i}-{term}"),
                        ten_seconds(Wait::For(Duration::from_secs(120))),
                    )
                    .await
                    .expect("a campaign among many leads in the end");
                if leading.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                terms.lock().expect("poisoned").push(g.term().get());
                sleep(Duration::from_millis(2)).await;
                leading.fetch_sub(1, Ordering::SeqCst);
                g.resign().await.expect("resign a held leadership");
            }
        }));
    }
    for task in tasks {
        task.await.expect("candidate task");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two leaders at once");
    let terms = terms.lock().expect("poisoned").clone();
    assert_eq!(terms.len(), CANDIDATES * TERMS);
    if ordered_terms(&locker(t).await) {
        super::support::assert_increasing(&terms);
    }
    Verdict::Passed
}

/// A leader's value and term are read by a client that never campaigned;
/// nobody leads before the first campaign or after the resign.
pub async fn election_value_is_read_by_non_candidates(t: &dyn Target) -> Verdict {
    let (a, reader) = (candidate(t).await, locker(t).await);
    let name = unique("elect-read");
    let election = reader.election(&name);
    assert_eq!(election.leader().await.expect("read"), None, "nobody yet");
    let g = a
        .election(&name)
        .campaign_with("10.1.2.3:8080", ten_seconds(Wait::No))
        .await
        .expect("a vacant election is won at once");
    assert_eq!(g.value(), "10.1.2.3:8080");
    let seen = election
        .leader()
        .await
        .expect("read")
        .expect("a leader is seen by a non-candidate");
    assert_eq!(seen.value, "10.1.2.3:8080");
    assert_eq!(seen.term, g.term(), "the term read is the leader's token");
    assert!(
        seen.expires_in
            .is_none_or(|left| left <= Duration::from_secs(10)),
        "{seen:?}"
    );
    g.resign().await.expect("resign");
    leader_until(&reader, &name, "after the resign", Option::is_none).await;
    Verdict::Passed
}

/// Only one of two candidates leads; the other is refused without a wait,
/// waits with one, and leads once the first resigns, with a greater term.
pub async fn election_resign_hands_over(t: &dyn Target) -> Verdict {
    let (a, b) = (candidate(t).await, candidate(t).await);
    let name = unique("elect-resign");
    let first = a
        .election(&name)
        .campaign_with("a", ten_seconds(Wait::No))
        .await
        .expect("first");
    let refused = b
        .election(&name)
        .campaign_with("b", ten_seconds(Wait::No))
        .await;
    assert!(
        refused.as_ref().is_err_and(Error::is_busy),
        "a second leader: {refused:?}"
    );
    let waiting = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move {
            b.election(&name)
                .campaign_with("b", ten_seconds(Wait::For(PROMPT * 2)))
                .await
        })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the standby led while 'a' did");
    let old = first.term();
    first.resign().await.expect("resign");
    let second = timeout(PROMPT, waiting)
        .await
        .expect("the standby leads soon after the resign")
        .expect("task")
        .expect("the standby's campaign");
    if ordered_terms(&a) {
        assert!(second.term() > old, "{:?} after {old:?}", second.term());
    }
    let seen = leader_until(&a, &name, "the new leader", |l| {
        l.as_ref().is_some_and(|l| l.value == "b")
    })
    .await;
    assert_eq!(seen.map(|l| l.term), Some(second.term()));
    second.resign().await.expect("resign");
    Verdict::Passed
}

/// A leader that stops renewing (its process died) is replaced once its
/// lease runs out, and the new term is greater.
pub async fn election_crashed_leader_is_replaced(t: &dyn Target) -> Verdict {
    let (a, b) = (candidate(t).await, candidate(t).await);
    let name = unique("elect-crash");
    let ttl = short_ttl(&a);
    // A bare lease: nobody renews it, as nobody would for a dead process.
    let crashed = a
        .lease_kind(&name, LockKind::Leader, opts(ttl, Wait::No))
        .await
        .expect("a vacant election");
    let next = b
        .election(&name)
        .campaign_with("survivor", opts(Duration::from_secs(10), patient(ttl)))
        .await
        .expect("the crashed leader is replaced after its TTL");
    if b.capabilities().fencing == Fencing::Strict {
        assert!(next.term() > crashed.token(), "{:?}", next.term());
    }
    let seen = b.election(&name).leader().await.expect("read");
    assert_eq!(seen.map(|l| l.value), Some("survivor".to_owned()));
    assert_not_held(
        "the crashed leader's proclaim",
        a.backend().proclaim(&crashed, "zombie").await,
    );
    next.resign().await.expect("resign");
    Verdict::Passed
}

/// `proclaim` changes the value and keeps the term; a stranger's proclaim
/// (a forged lease) and one after the resign are refused and change nothing.
pub async fn election_proclaim_keeps_the_term(t: &dyn Target) -> Verdict {
    let (a, reader) = (candidate(t).await, locker(t).await);
    let name = unique("elect-proclaim");
    let g = a
        .election(&name)
        .campaign_with("v1", ten_seconds(Wait::No))
        .await
        .expect("lead");
    let term = g.term();
    g.proclaim("v2").await.expect("proclaim while leading");
    assert_eq!(g.value(), "v2");
    assert_eq!(g.term(), term, "a proclaim keeps the term");
    let seen = reader.election(&name).leader().await.expect("read");
    assert_eq!(
        seen.as_ref().map(|l| (l.value.as_str(), l.term)),
        Some(("v2", term))
    );
    assert!(
        g.is_leading().await.expect("ask"),
        "a proclaim keeps the lead"
    );
    assert_not_held(
        "a stranger's proclaim",
        a.backend().proclaim(&forged(&g.lease()), "stolen").await,
    );
    let lease = g.lease();
    g.resign().await.expect("resign");
    assert_not_held(
        "a proclaim after the resign",
        a.backend().proclaim(&lease, "late").await,
    );
    let after = reader.election(&name).leader().await.expect("read");
    assert!(
        after.is_none(),
        "a refused proclaim made a leader: {after:?}"
    );
    Verdict::Passed
}

/// An observer that keeps up sees every change, in order: each leader,
/// each proclaimed value, each vacancy.
pub async fn election_observers_see_every_change_in_order(t: &dyn Target) -> Verdict {
    let (a, b, watcher) = (candidate(t).await, candidate(t).await, locker(t).await);
    let name = unique("elect-observe");
    let mut watch = watcher
        .election(&name)
        .observe()
        .poll_every(Duration::from_millis(50));
    let (tx, mut rx) = mpsc::unbounded_channel();
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
            .expect("the observer sees the change")
            .expect("observer alive")
    };
    assert_eq!(next().await, None, "nobody leads at first");
    let g = a
        .election(&name)
        .campaign_with("a1", ten_seconds(Wait::No))
        .await
        .expect("lead");
    assert_eq!(next().await, Some(("a1".to_owned(), g.term())));
    g.proclaim("a2").await.expect("proclaim");
    assert_eq!(next().await, Some(("a2".to_owned(), g.term())));
    g.resign().await.expect("resign");
    assert_eq!(next().await, None, "the vacancy after the resign");
    let h = b
        .election(&name)
        .campaign_with("b1", ten_seconds(Wait::No))
        .await
        .expect("lead");
    assert_eq!(next().await, Some(("b1".to_owned(), h.term())));
    h.resign().await.expect("resign");
    assert_eq!(next().await, None);
    observer.abort();
    Verdict::Passed
}

/// Campaigns dropped at random points while somebody leads leave no
/// candidacy behind: once the leader resigns, nobody leads, and a new
/// candidate wins at once.
pub async fn election_cancelled_campaigns_leave_nothing(t: &dyn Target) -> Verdict {
    const CAMPAIGNS: usize = 6;
    let leader = candidate(t).await;
    let name = unique("elect-cancel");
    let g = leader
        .election(&name)
        .campaign_with("leader", ten_seconds(Wait::No))
        .await
        .expect("lead");
    let mut dropped = Vec::new();
    for i in 0..CAMPAIGNS {
        let l = candidate(t).await;
        let name = name.clone();
        let after = Duration::from_millis(rand::rng().random_range(0..60));
        dropped.push(tokio::spawn(async move {
            // A long TTL: a candidacy left behind would outlive the checks.
            let election = l.election(&name);
            let campaign = election.campaign_with(
                format!("dropped-{i}"),
                opts(Duration::from_secs(60), Wait::Forever),
            );
            let outcome = timeout(after, campaign).await;
            assert!(outcome.is_err(), "a campaign led while another leader held");
        }));
    }
    for task in dropped {
        task.await.expect("campaign task");
    }
    // Give cleanups of requests still in flight a moment to land.
    sleep(Duration::from_millis(200)).await;
    g.resign().await.expect("resign");
    let reader = locker(t).await;
    leader_until(&reader, &name, "no dropped campaign leads", Option::is_none).await;
    sleep(Duration::from_millis(300)).await;
    let late = reader.election(&name).leader().await.expect("read");
    assert!(late.is_none(), "a dropped campaign came to lead: {late:?}");
    let fresh = candidate(t).await;
    let won = fresh
        .election(&name)
        .campaign_with("fresh", ten_seconds(Wait::No))
        .await
        .expect("a new candidate wins a vacant election at once");
    won.resign().await.expect("resign");
    Verdict::Passed
}

/// Bad values and names are refused before any request, a leader that
/// campaigns again is told it leads instead of waiting on itself, and a
/// leader's guard is of the election's own family.
pub async fn election_rejects_bad_input(t: &dyn Target) -> Verdict {
    let l = candidate(t).await;
    let name = unique("elect-bad");
    let election = l.election(&name);
    for bad in ["nul\0inside".to_owned(), "x".repeat(Leader::MAX_VALUE + 1)] {
        let e = election
            .campaign_with(bad, ten_seconds(Wait::No))
            .await
            .expect_err("a bad value");
        assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
    }
    let e = l
        .election("bad name\n")
        .leader()
        .await
        .expect_err("a bad name");
    assert!(e.is_invalid_input(), "{e}");
    let g: LeaderGuard = election
        .campaign_with("ok", ten_seconds(Wait::No))
        .await
        .expect("lead");
    let again = timeout(
        PROMPT,
        election.campaign_with("again", ten_seconds(Wait::For(PROMPT * 2))),
    )
    .await
    .expect("a leader campaigning again does not wait on itself");
    assert!(
        matches!(again, Err(Error::AlreadyHeld { .. })),
        "a leader's second campaign: {again:?}"
    );
    let e = g.proclaim("x".repeat(Leader::MAX_VALUE + 1)).await;
    assert!(matches!(e, Err(Error::InvalidValue { .. })), "{e:?}");
    assert_eq!(g.value(), "ok", "a refused proclaim changes nothing");
    assert_eq!(g.kind(), LockKind::Leader);
    g.resign().await.expect("resign");
    Verdict::Passed
}
