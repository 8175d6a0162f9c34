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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Mutex as FifoMutex, OwnedMutexGuard};

use crate::error::Result;
use crate::name::LockName;
use crate::options::WaitBudget;

/// A turn at the backend for one name; the next waiter's starts when it is
/// dropped.
pub(crate) type Turn = OwnedMutexGuard<()>;

#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// Tokio's mutex queues its waiters first come, first served.
    names: Mutex<HashMap<LockName, Weak<FifoMutex<()>>>>,
}

impl Turns {
    /// Waits until every waiter of `name` that came before has had its turn,
    /// within `budget`.
    pub(crate) async fn take(&self, name: &LockName, budget: &WaitBudget) -> Result<Turn> {
        let queue = self.queue(name);
        if let Ok(turn) = queue.clone().try_lock_owned() {
            return Ok(turn);
        }
        budget
            .race(queue.lock_owned())
            .await
            .ok_or_else(|| budget.exhausted(name))
    }

    fn queue(&self, name: &LockName) -> Arc<FifoMutex<()>> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(queue) = names.get(name).and_then(Weak::upgrade) {
            return queue;
        }
        // Forget names nobody waits on before adding one, so the map stays
        // as small as the set of names being acquired right now.
        names.retain(|_, q| q.strong_count() > 0);
        let queue = Arc::new(FifoMutex::new(()));
        names.insert(name.clone(), Arc::downgrade(&queue));
        queue
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
        let turns = Arc::new(Turns::default());
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
        assert_eq!(turns.names.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_does_not_come_in_time_is_a_wait_timeout() {
        let turns = Turns::default();
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
