//! SQLite's queue for one backend's writes to its read-write locks, and
//! the connection a write runs on ([`Writer`]), in its turn where it
//! queues.
//!
//! SQLite takes one writer at a time and makes the others sleep in its busy
//! handler, a millisecond and more per collision, where the grants and
//! releases of one lock's sides come in quick turns; queued here, the next
//! write goes as soon as the last one ends. Other families do not queue: a
//! semaphore's waiters, woken by a release, would then make their refused
//! attempts in line with the grants (measured slower, docs/BENCHMARKS.md).
//! Writes of other processes, and of other backends on the same file, still
//! meet this one's in the busy handler.
//!
//! A turn lasts until its connection has done all it was sent, not until
//! its caller stops waiting: sqlx's SQLite worker runs a statement to its
//! end after the statement's future is dropped, and rolls back a
//! transaction dropped unfinished after that. A turn let go with them still
//! running would let the next write start beside them, into the busy
//! handler or, on a pool without a busy timeout, into "database is locked".
//!
//! A wait for a turn stands in for SQLite's busy handler, so it ends the
//! same way, with the same retryable "database is locked" and nothing
//! sent: after the backend's statement timeout (the busy timeout of a pool
//! it opened itself), or as soon as a write ahead of it, in its turn, was
//! kept waiting by a writer outside the queue for at least half the busy
//! timeout (it failed busy, or its caller gave up on it). Without that,
//! writes queued behind another process's long write lock would each wait
//! out their own busy timeout in turn, past their caller's limit, and end
//! with an outcome nobody knows. A collision shorter than that (on a pool with
//! no busy timeout, any collision) says nothing about the next write, and
//! fails no other. A write whose caller gave up is judged by how long it
//! held its turn, since nobody sees its answer: one held up as long by a
//! slow disk's sync counts as kept out too.
//!
//! A write that waited for its turn then waits for a pooled connection
//! (the pool's acquire timeout, the `connect_timeout` on a pool the backend
//! opened), and still has the whole busy timeout for its own statement: if
//! another writer takes the database just then, the waits add up, and the caller's limit (the statement timeout and a
//! second) can end it first. Only the statement's own wait counts as kept
//! out; a wait for the pool says nothing of other processes' writers, and
//! neither does an error other than busy.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Connection as _, Database};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::{Instant, timeout};

/// Why a write got no turn.
#[derive(Debug)]
pub(crate) enum NoTurn {
    /// It waited the queue's whole limit.
    Waited(Duration),
    /// A write ahead of it was kept out by another writer for long.
    LockedOut,
}

/// One backend's queue of writes (SQLite's).
#[derive(Debug)]
pub(crate) struct WriteQueue {
    turn: Arc<Mutex<()>>,
    /// The longest wait for a turn.
    limit: Duration,
    /// The connections' busy timeout.
    busy: Duration,
    /// When a write in its turn was last kept out by another writer.
    locked_out: SyncMutex<Option<Instant>>,
}

/// A turn in a [`WriteQueue`].
#[derive(Debug)]
pub(crate) struct Turn {
    _turn: OwnedMutexGuard<()>,
    queue: Arc<WriteQueue>,
    /// When its write began: the connection in hand, so that a wait for
    /// the pool is not taken for a wait in SQLite's busy handler.
    began: Instant,
}

impl WriteQueue {
    /// A queue whose writes wait at most `limit` for their turn, on
    /// connections with the busy timeout `busy`.
    #[cfg(feature = "sqlite")]
    pub(crate) fn new(limit: Duration, busy: Duration) -> Arc<Self> {
        Arc::new(Self {
            turn: Arc::default(),
            limit,
            busy,
            locked_out: SyncMutex::new(None),
        })
    }

    /// Waits for a turn.
    pub(crate) async fn turn(self: &Arc<Self>) -> Result<Turn, NoTurn> {
        let since = Instant::now();
        let turn = timeout(self.limit, self.turn.clone().lock_owned())
            .await
            .map_err(|_| NoTurn::Waited(self.limit))?;
        if self.last_locked_out().is_some_and(|at| at > since) {
            return Err(NoTurn::LockedOut);
        }
        Ok(Turn {
            _turn: turn,
            queue: self.clone(),
            began: Instant::now(),
        })
    }

    fn last_locked_out(&self) -> Option<Instant> {
        *self
            .locked_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Turn {
    /// After a write that failed busy or was given up: if it was kept
    /// waiting for at least half the busy timeout, tells the writes queued behind
    /// it that another writer holds the database for long.
    fn kept_out(&self) {
        let queue = &self.queue;
        if queue.busy.is_zero() || self.began.elapsed() < queue.busy / 2 {
            return;
        }
        *queue
            .locked_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }
}

/// A pooled connection for one write, in its turn where writes queue. The
/// turn ends when the write is [`answered`](Self::answered) with success;
/// otherwise (an error, or the caller's future dropped) once the
/// connection has done all it was sent.
pub(crate) struct Writer<DB: Database> {
    conn: Option<PoolConnection<DB>>,
    turn: Option<Turn>,
    outcome: Outcome,
}

/// How a [`Writer`]'s write ended, as far as its caller saw.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Its caller stopped waiting first.
    Unseen,
    Succeeded,
    /// With an error, already weighed by [`Writer::answered`].
    Failed,
}

impl<DB: Database> Writer<DB> {
    pub(crate) fn new(conn: PoolConnection<DB>, mut turn: Option<Turn>) -> Self {
        if let Some(turn) = &mut turn {
            turn.began = Instant::now();
        }
        Self {
            conn: Some(conn),
            turn,
            outcome: Outcome::Unseen,
        }
    }

    /// Passes the write's result on, noting how it ended: a success leaves
    /// the connection idle; SQLite's busy or locked means another writer
    /// holds the database; any other error says nothing of other writers.
    pub(crate) fn answered<T>(&mut self, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        self.outcome = match &result {
            Ok(_) => Outcome::Succeeded,
            Err(e) => {
                if let (Some(turn), true) = (&self.turn, crate::error::busy(e)) {
                    turn.kept_out();
                }
                Outcome::Failed
            }
        };
        result
    }
}

impl<DB: Database> Deref for Writer<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        self.conn
            .as_ref()
            .expect("a writer's connection is there until it drops")
    }
}

impl<DB: Database> DerefMut for Writer<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.conn
            .as_mut()
            .expect("a writer's connection is there until it drops")
    }
}

impl<DB: Database> Drop for Writer<DB> {
    fn drop(&mut self) {
        let outcome = self.outcome;
        let (Some(turn), false) = (self.turn.take(), outcome == Outcome::Succeeded) else {
            return;
        };
        let (Some(mut conn), Ok(runtime)) =
            (self.conn.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        // The connection's worker answers a ping after everything sent
        // before it: the statement cut short, then the rollback of a
        // transaction dropped unfinished. A worker that does not answer
        // within the longest a write may take (its wait in the busy
        // handler, and a turn's wait again) lets the queue go on, and
        // its connection is not handed to another write.
        let bound = turn.queue.busy + turn.queue.limit;
        runtime.spawn(async move {
            let pinged = timeout(bound, conn.ping()).await;
            if !matches!(pinged, Ok(Ok(()))) {
                conn.close_on_drop();
            }
            drop(conn);
            // Its outcome unseen: a write that held its turn this long was
            // kept waiting.
            if outcome == Outcome::Unseen || pinged.is_err() {
                turn.kept_out();
            }
            drop(turn);
        });
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    /// Long enough that no wait in these tests runs into it, even on a
    /// machine that stalls for seconds.
    const LIMIT: Duration = Duration::from_secs(30);
    const BUSY: Duration = Duration::from_secs(1);

    /// A turn taken behind `first`, which is held for `held`, then let go
    /// as a write that failed busy lets it go.
    async fn behind(queue: &Arc<WriteQueue>, held: Duration) -> Result<(), NoTurn> {
        let first = queue.turn().await.unwrap();
        let next = tokio::spawn({
            let queue = queue.clone();
            async move { queue.turn().await.map(drop) }
        });
        tokio::time::sleep(held).await;
        first.kept_out();
        drop(first);
        next.await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_write_kept_out_for_long_fails_those_queued_behind_it() {
        let queue = WriteQueue::new(LIMIT, BUSY);
        assert!(
            behind(&queue, BUSY / 10).await.is_ok(),
            "a short collision fails no other write"
        );
        assert!(matches!(behind(&queue, BUSY).await, Err(NoTurn::LockedOut)));
        assert!(
            queue.turn().await.is_ok(),
            "a write that comes after it waits as usual"
        );

        let no_busy_timeout = WriteQueue::new(LIMIT, Duration::ZERO);
        assert!(
            behind(&no_busy_timeout, BUSY).await.is_ok(),
            "without a busy timeout, a collision tells nothing of the next"
        );

        let first = queue.turn().await.unwrap();
        let waited = queue.turn().await;
        assert!(matches!(waited, Err(NoTurn::Waited(LIMIT))));
        drop(first);
    }

    /// A pool on a database file in `dir` whose connections fail busy at
    /// once, and a connection of another process's making that holds the
    /// database's write lock.
    async fn pool_and_other_writer(
        dir: &tempfile::TempDir,
    ) -> (sqlx::SqlitePool, sqlx::SqliteConnection) {
        use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("queue.db"))
            .create_if_missing(true)
            .busy_timeout(Duration::ZERO);
        let pool = SqlitePoolOptions::new()
            .connect_with(options.clone())
            .await
            .unwrap();
        let mut other = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        (pool, other)
    }

    /// Whether a turn taken while `write` holds the one before it fails,
    /// on a queue whose connections have the busy timeout `busy`, `write`
    /// being given a writer whose turn was taken `before` it got its
    /// connection (standing for a wait for the pool).
    async fn fails_the_next<F>(busy: Duration, before: Duration, write: F) -> bool
    where
        F: AsyncFnOnce(&mut Writer<sqlx::Sqlite>),
    {
        let dir = tempfile::tempdir().unwrap();
        let (pool, _other) = pool_and_other_writer(&dir).await;
        let queue = WriteQueue::new(LIMIT, busy);
        let turn = queue.turn().await.unwrap();
        let next = tokio::spawn({
            let queue = queue.clone();
            async move { queue.turn().await.map(drop) }
        });
        tokio::time::sleep(before).await;
        let mut writer = Writer::new(pool.acquire().await.unwrap(), Some(turn));
        write(&mut writer).await;
        drop(writer);
        matches!(next.await.unwrap(), Err(NoTurn::LockedOut))
    }

    async fn write_busy(writer: &mut Writer<sqlx::Sqlite>) {
        let result = sqlx::query("BEGIN IMMEDIATE").execute(&mut **writer).await;
        let e = writer.answered(result).unwrap_err();
        assert!(crate::error::busy(&e), "{e}");
    }

    #[tokio::test]
    async fn a_write_fails_those_behind_it_only_for_its_own_long_busy_wait() {
        // A wait for the pool past half the busy timeout, then a busy
        // answer well within it (half of 4 s: room for a slow machine).
        let busy = BUSY * 4;
        assert!(
            !fails_the_next(busy, busy * 3 / 4, write_busy).await,
            "a wait for the pool is not a wait in the busy handler"
        );
        assert!(
            !fails_the_next(BUSY, Duration::ZERO, async |writer: &mut Writer<_>| {
                tokio::time::sleep(BUSY).await;
                let result = sqlx::query("SELECT * FROM nowhere")
                    .execute(&mut **writer)
                    .await;
                let e = writer.answered(result).unwrap_err();
                assert!(!crate::error::busy(&e), "{e}");
            })
            .await,
            "an error other than busy says nothing of other writers"
        );
        assert!(
            fails_the_next(BUSY, Duration::ZERO, async |writer: &mut Writer<_>| {
                tokio::time::sleep(BUSY).await;
                write_busy(writer).await;
            })
            .await,
            "a write kept out for long does fail those behind it"
        );
    }
}
