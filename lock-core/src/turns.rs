//! Waiters of one name in one [`Locker`](crate::Locker) go to the backend
//! one at a time, in the order they arrived, unless its server queues them.
//!
//! A polling waiter's naps grow towards the backoff cap while it waits, so
//! a newcomer — above all the task that just released the lock and asks
//! again at once — would try before it and win nearly every time; a waiter
//! could starve behind a busy neighbour in its own process. Queued here, the
//! newcomer waits its turn, and the one waiter at the backend is the oldest,
//! woken at once by the release signal of a local release. The same holds
//! for a waiter woken by its server (Redis pub/sub, PostgreSQL `NOTIFY`):
//! the notice takes longer to arrive than the releaser takes to ask again.
//! Backends whose server queues waiters in order ([`Capabilities::fifo`]:
//! etcd, ZooKeeper) do not take turns here: their server keeps the order,
//! and holding a local waiter back would only let remote ones queue first.
//!
//! [`Capabilities::fifo`]: crate::Capabilities::fifo

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

use crate::error::Result;
use crate::name::LockName;
use crate::options::WaitBudget;
use crate::per_name::Entry;
use crate::record::{Record, Records};

/// A turn at the backend for one name; the next waiter's starts when it is
/// dropped.
#[derive(Debug)]
pub(crate) struct Turn<T> {
    _turn: OwnedMutexGuard<()>,
    record: Arc<Entry<Record<T>>>,
}

/// Marks the name held by a guard of this locker until dropped.
#[derive(Debug)]
pub(crate) struct LocalHold<T>(Arc<Entry<Record<T>>>);

impl<T> Drop for LocalHold<T> {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
        self.0.let_go.notify_waiters();
    }
}

/// The longest a turn waits for a local holder to let go before trying
/// the backend anyway (a guard kept after its lease was lost, say).
const LOCAL_WAIT: Duration = Duration::from_millis(100);

impl<T> Turn<T> {
    /// While a guard of this locker holds the name, an attempt can only
    /// fail. On a store that writes serially (SQLite) it also takes the
    /// write lock the holder needs to release, a busy wait for both; where
    /// the backend's requests are ordered (Redis, Redlock), waiting lets the
    /// attempt go out right behind the release, on its heels. Elsewhere (a
    /// pool of connections, memcached's threads) the locker does not call
    /// this: an attempt made at once, failed or not, measured faster. Waits
    /// until that guard lets go (at most [`LOCAL_WAIT`], within `budget`).
    pub(crate) async fn after_local_holder(&self, budget: &WaitBudget) {
        let let_go = self.record.let_go.notified();
        tokio::pin!(let_go);
        let_go.as_mut().enable();
        if self.record.held.load(Ordering::Acquire) == 0 {
            return;
        }
        budget.waiting();
        let _ = budget.race(tokio::time::timeout(LOCAL_WAIT, let_go)).await;
    }

    /// The name's record, to mark a grant made in this turn as held
    /// locally.
    pub(crate) fn record(&self) -> Arc<Entry<Record<T>>> {
        self.record.clone()
    }
}

/// Counts a guard of this locker holding the name of `record` until the
/// result is dropped.
pub(crate) fn hold<T>(record: Arc<Entry<Record<T>>>) -> LocalHold<T> {
    record.held.fetch_add(1, Ordering::AcqRel);
    LocalHold(record)
}

impl<T> Records<T> {
    /// Waits until every waiter of `name` that came before has had its turn,
    /// within `budget`.
    pub(crate) async fn take(&self, name: &LockName, budget: &WaitBudget) -> Result<Turn<T>> {
        let record = self.record(name);
        let turn = match record.fifo.clone().try_lock_owned() {
            Ok(turn) => turn,
            Err(_) => {
                budget.waiting();
                budget
                    .race(record.fifo.clone().lock_owned())
                    .await
                    .ok_or_else(|| budget.exhausted(name))?
            }
        };
        Ok(Turn {
            _turn: turn,
            record,
        })
    }

    /// The record of `name`, made if nobody uses it yet.
    pub(crate) fn record(&self, name: &LockName) -> Arc<Entry<Record<T>>> {
        self.0.get_or_make(name)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::options::Wait;

    #[tokio::test]
    async fn turns_go_in_arrival_order_and_names_are_forgotten() {
        let turns = Arc::new(Records::<()>::default());
        let name = LockName::new("a").unwrap();
        let first = turns.take(&name, &WaitBudget::forever()).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 {
            let (turns, name, tx) = (turns.clone(), name.clone(), tx.clone());
            tokio::spawn(async move {
                let _turn = turns.take(&name, &WaitBudget::forever()).await.unwrap();
                tx.send(i).unwrap();
            });
            // Each waiter is queued before the next one starts.
            tokio::task::yield_now().await;
        }
        drop(first);
        let order: Vec<i32> = [rx.recv().await, rx.recv().await, rx.recv().await]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(order, [0, 1, 2]);
        let _other = turns
            .take(&LockName::new("b").unwrap(), &WaitBudget::forever())
            .await
            .unwrap();
        assert_eq!(turns.0.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_does_not_come_in_time_is_a_wait_timeout() {
        let turns = Records::<()>::default();
        let name = LockName::new("a").unwrap();
        let _held = turns.take(&name, &WaitBudget::forever()).await.unwrap();
        let budget = WaitBudget::new(
            Wait::For(Duration::from_millis(50)),
            CancellationToken::new(),
        );
        let err = turns.take(&name, &budget).await.unwrap_err();
        assert!(matches!(err, crate::Error::WaitTimeout { .. }), "{err}");
    }
}
