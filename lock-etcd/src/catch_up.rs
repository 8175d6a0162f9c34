//! Waiting on a watch that may start out behind.
//!
//! A watch "from now" can: etcd reads its current revision, then registers
//! the watch from the next one, and a commit that lands in between leaves
//! the watch to its catch-up loop, which sends its events every 100 ms.
//! Under a stream of commits (readers and writers taking turns, permits
//! changing hands) that befalls a few watches in a hundred, and each such
//! watch holds its waiter, and every waiter behind it, for up to 100 ms.
//! So a waiter also looks for itself, a few times within the loop's first
//! round; after it the watch is in step, and the looks stop.
//!
//! Only in a short line, though. A look is a sorted read of the whole line
//! on the server, and a watch set up behind a long line is not told of its
//! key's deletion until the keys ahead have had their turns, long after the
//! loop has brought it in step: there the looks would only add reads of
//! every key to every wait, which is what the line's turns wait for.

use std::future::Future;
use std::time::Duration;

use lock_core::Result;

/// When a waiter looks while its watch has told it nothing, each nap
/// counted from the end of the last look: together past one round of
/// etcd's catch-up loop.
pub(crate) const LOOKS: &[Duration] = &[
    Duration::from_millis(10),
    Duration::from_millis(30),
    Duration::from_millis(70),
];

/// The longest line, counting the keys behind the waiter's own, in which
/// a waiter looks: a few turns at most, each about a round trip, before
/// its key's deletion is due.
const SHORT_LINE: i64 = 16;

/// The looks of a waiter that found `queued` keys in its line.
pub(crate) fn looks_in_line_of(queued: i64) -> &'static [Duration] {
    if queued <= SHORT_LINE { LOOKS } else { &[] }
}

/// What `event` (a watch's) yields, or what `look` found first, looking
/// after each of `looks` in turn: `look` answers `None` when it found
/// nothing the watch would have told.
pub(crate) async fn watched_or_looked<T, L: Future<Output = Result<Option<T>>>>(
    event: impl Future<Output = Result<T>>,
    mut look: impl FnMut() -> L,
    looks: &[Duration],
) -> Result<T> {
    let mut event = std::pin::pin!(event);
    for &nap in looks {
        tokio::select! {
            outcome = &mut event => return outcome,
            () = tokio::time::sleep(nap) => {}
        }
        if let Some(found) = look().await? {
            return Ok(found);
        }
    }
    event.await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_look_ends_the_wait_and_the_looks_stop_after_a_round() {
        // A wait with no look would never end: a second of (paused) time
        // bounds each.
        let mut looks = 0;
        let found = tokio::time::timeout(
            Duration::from_secs(1),
            watched_or_looked(
                std::future::pending::<Result<u32>>(),
                || {
                    looks += 1;
                    std::future::ready(Ok((looks == 2).then_some(7)))
                },
                LOOKS,
            ),
        )
        .await;
        assert_eq!(found.expect("ended by a look").unwrap(), 7);
        assert_eq!(looks, 2);

        let start = tokio::time::Instant::now();
        let mut looked_at = Vec::new();
        let event = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(3)
        };
        let found = watched_or_looked(
            event,
            || {
                looked_at.push(start.elapsed().as_millis());
                std::future::ready(Ok(None))
            },
            looks_in_line_of(SHORT_LINE),
        )
        .await;
        assert_eq!(found.unwrap(), 3);
        assert_eq!(
            looked_at,
            [10, 40, 110],
            "none after the loop's first round"
        );

        let mut looked = 0;
        let event = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(5)
        };
        let look = || {
            looked += 1;
            std::future::ready(Ok(None))
        };
        let found = watched_or_looked(event, look, looks_in_line_of(SHORT_LINE + 1)).await;
        assert_eq!(found.unwrap(), 5);
        assert_eq!(looked, 0, "no looks in a long line");

        let failed = tokio::time::timeout(
            Duration::from_secs(1),
            watched_or_looked(
                std::future::pending::<Result<u32>>(),
                || std::future::ready(Err(lock_core::Error::backend("a look failed"))),
                LOOKS,
            ),
        )
        .await;
        assert!(
            failed.expect("ended by the look").is_err(),
            "a look's error is the wait's, as a read's"
        );
    }
}
