//! `Turns` by itself: what a release names, hands and leaves.

use super::*;

const TTL: Duration = Duration::from_secs(30);
const WITHIN: Duration = Duration::from_secs(5);

fn offer(turns: &Arc<Turns>, owner: &str, side: Side, token: i64) -> Offer {
    turns.offer("n", owner, side, token, Instant::now() + TTL, WITHIN)
}

#[tokio::test]
async fn waiters_skip_what_this_backend_holds_until_it_ends() {
    let turns = Arc::new(Turns::default());
    let now = Instant::now();
    turns.attempted("n", "w", Side::Write, TTL, now, Some(Some(1)));
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Wait);
    assert_eq!(turns.turn("n", "v", Side::Write, TTL), Turn::Wait);
    assert_eq!(turns.turn("m", "r", Side::Read, TTL), Turn::Attempt);
    // Readers share; a waiting writer keeps arriving readers back.
    turns.attempted("s", "r1", Side::Read, TTL, now, Some(Some(2)));
    assert_eq!(turns.turn("s", "r2", Side::Read, TTL), Turn::Attempt);
    turns.attempted("s", "w", Side::Write, TTL, now, Some(None));
    assert_eq!(turns.turn("s", "r3", Side::Read, TTL), Turn::Wait);
    // A lease that ran out blocks nobody, nor does an unsure writer.
    turns.attempted("e", "w", Side::Write, Duration::ZERO, now, Some(Some(3)));
    assert_eq!(turns.turn("e", "r", Side::Read, TTL), Turn::Attempt);
    turns.attempted("u", "w", Side::Write, TTL, now, None);
    assert_eq!(turns.turn("u", "r", Side::Read, TTL), Turn::Attempt);
}

#[tokio::test]
async fn a_release_names_one_writer_or_the_readers_and_hands_them_their_grants() {
    let turns = Arc::new(Turns::default());
    let now = Instant::now();
    turns.attempted("n", "w", Side::Write, TTL, now, Some(Some(1)));
    for reader in ["r1", "r2"] {
        assert_eq!(turns.turn("n", reader, Side::Read, TTL), Turn::Wait);
    }
    turns.attempted("n", "v", Side::Write, TTL, now, Some(None));
    let release = offer(&turns, "w", Side::Write, 1);
    let named: Vec<_> = release
        .waiters
        .iter()
        .map(|w| (w.owner.as_str(), w.side))
        .collect();
    assert_eq!(named, [("v", Side::Write)], "one writer alone");
    // Named to the release: it waits for its answer.
    assert_eq!(turns.turn("n", "v", Side::Write, TTL), Turn::Wait);
    let settled = release.settle(vec![("v".into(), 2)], now);
    assert!(settled.orphans.is_empty() && settled.wake);
    assert_eq!(turns.turn("n", "v", Side::Write, TTL), Turn::Handed(2, now));
    // v's release names both readers; one gave up meanwhile.
    let release = offer(&turns, "v", Side::Write, 2);
    assert_eq!(release.waiters.len(), 2);
    assert_eq!(turns.gave_up("n", "r2"), (None, false));
    let settled = release.settle(vec![("r1".into(), 3), ("r2".into(), 4)], now);
    assert_eq!(settled.orphans, vec![("r2".to_owned(), 4)]);
    // While r1 holds (handed), a release of another names nobody.
    let release = offer(&turns, "x", Side::Read, 9);
    assert!(release.waiters.is_empty());
    drop(release);
}

#[tokio::test]
async fn a_grant_handed_meanwhile_is_never_lost_to_a_mark_of_waiting() {
    let turns = Arc::new(Turns::default());
    let now = Instant::now();
    turns.attempted("n", "w", Side::Write, TTL, now, Some(Some(1)));
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Wait);
    let release = offer(&turns, "w", Side::Write, 1);
    let _ = release.settle(vec![("r".into(), 2)], now);
    // A writer of this backend arrives and waits: r still holds its
    // grant, and finds it.
    turns.attempted("n", "v", Side::Write, TTL, now, Some(None));
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Handed(2, now));
}

#[tokio::test]
async fn an_unsure_waiter_is_neither_named_nor_handed_nor_let_go() {
    let turns = Arc::new(Turns::default());
    let now = Instant::now();
    turns.attempted("n", "w", Side::Write, TTL, now, Some(Some(1)));
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Wait);
    let release = offer(&turns, "w", Side::Write, 1);
    // r's own attempt, sent before, timed out: it may yet be applied.
    turns.attempted("n", "r", Side::Read, TTL, now, None);
    let settled = release.settle(vec![("r".into(), 2)], now);
    assert!(settled.orphans.is_empty(), "its own attempt settles it");
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Attempt);
    let release = offer(&turns, "q", Side::Read, 5);
    assert!(release.waiters.is_empty(), "not named");
    drop(release);
}

#[tokio::test]
async fn a_release_that_fails_or_is_parked_holds_no_waiter() {
    let turns = Arc::new(Turns::default());
    let now = Instant::now();
    turns.attempted("n", "w", Side::Write, TTL, now, Some(Some(1)));
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Wait);
    drop(offer(&turns, "w", Side::Write, 1));
    assert_eq!(
        turns.turn("n", "r", Side::Read, TTL),
        Turn::Attempt,
        "w is gone"
    );
    // Parked after its first poll: the waiters it named wait for it no
    // longer than a statement may take, and it blocks nobody past its
    // lease's end.
    turns.attempted("n", "w", Side::Write, TTL, now, Some(Some(6)));
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Wait);
    let parked = turns.offer("n", "w", Side::Write, 6, Instant::now(), Duration::ZERO);
    assert!(!parked.waiters.is_empty());
    assert_eq!(turns.turn("n", "r", Side::Read, TTL), Turn::Attempt);
    // A grant the release made, and the waiter's own attempt kept, is
    // no orphan.
    turns.attempted("n", "r", Side::Read, TTL, now, Some(Some(7)));
    let settled = parked.settle(vec![("r".into(), 7)], now);
    assert!(settled.orphans.is_empty());
}
