//! A read-write lock's hand-over on [`SqlBackend`], where the dialect
//! leaves and admits in one transaction: the release that admits the
//! waiters of this backend it can and hands them their grants, and the
//! clean-up of an acquire that ended without taking what it was handed
//! (`handover.rs` keeps who is doing what).

use std::sync::Arc;

use lock_core::backend::{AcquireRequest, Lease};
use lock_core::{Error, FencingToken, LockKind, Result};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::SqlBackend;
use crate::client::within;
use crate::driver::Released;
use crate::groups::GroupKey;
use crate::handover::{Side, Turns};

impl SqlBackend {
    /// The registry of read-write acquirers and the side, for a `kind` of a
    /// read-write lock where a release can admit them.
    pub(super) fn turns_for(&self, kind: LockKind) -> Option<(&Arc<Turns>, Side)> {
        let side = match kind {
            LockKind::Read => Side::Read,
            LockKind::Write => Side::Write,
            _ => return None,
        };
        Some((self.turns.as_ref()?, side))
    }

    /// A read-write lock's release that admits the waiters of this backend
    /// it can, and hands them their grants (`handover.rs`).
    ///
    /// The statement and what follows it (handing the grants over, waking
    /// the waiters, letting go of grants made for acquirers that stopped
    /// waiting) run in a task of their own, to their end, whether or not
    /// the caller still waits. Cut between its statements, a dialect's
    /// transaction could leave its connection in the pool inside a
    /// transaction the server still holds open (sqlx undoes none it has not
    /// seen begin), row locks and all; and grants it made that nobody
    /// handed over would keep their waiters, and anyone behind them, out
    /// until their TTL.
    pub(super) async fn leave_and_admit(
        &self,
        turns: &Arc<Turns>,
        group: &GroupKey,
        lease: &Lease,
        side: Side,
    ) -> Result<Released> {
        let (name, owner, token) = (lease.name(), lease.owner().to_hex(), lease.token());
        let (lease_end, limit) = (lease.deadline(), self.op_timeout);
        let offer = turns.offer(
            name.as_str(),
            &owner,
            side,
            token.to_i64(),
            lease_end,
            limit,
        );
        let sent = Instant::now();
        let (driver, signals) = (self.driver.clone(), self.signals.clone());
        let (group, family, name) = (group.clone(), lease.kind().family(), name.clone());
        // The caller learns the answer once the grants are handed over, not
        // after the orphans are let go.
        let (answer, answered) = oneshot::channel();
        tokio::spawn(async move {
            let statement = driver.leave_and_admit(&group, &owner, token, &offer.waiters);
            let (left, admitted) = match statement.await {
                Ok(answer) => answer,
                Err(e) => {
                    drop(offer);
                    signals.wake(family, &name);
                    let _ = answer.send(Err(e));
                    return;
                }
            };
            let settled = offer.settle(admitted, sent);
            // The waiters handed a grant hold from the release's send:
            // woken first.
            if settled.wake {
                signals.wake(family, &name);
            }
            let _ = answer.send(Ok(left));
            for (waiter, token) in settled.orphans {
                // Admitted as it stopped waiting: let go at once.
                let orphan = driver.leave(&group, &waiter, FencingToken::from_i64(token));
                let _ = within(limit, "release", orphan).await;
            }
        });
        let backend = self.driver.capabilities().backend;
        let answered = async {
            answered.await.unwrap_or_else(|_| {
                Err(Error::backend(format!(
                    "{backend} release: the task running it ended"
                )))
            })
        };
        Ok(match self.bounded("release", answered).await? {
            true => Released::InTime,
            false => Released::NotOurs,
        })
    }

    /// After a read-write lock's acquire ended without a grant: a grant a
    /// release handed it meanwhile is let go at once, not at its TTL, and
    /// the waiters it kept back look again.
    pub(super) async fn gave_up(&self, req: &AcquireRequest) {
        let Some((turns, _)) = self.turns_for(req.kind) else {
            return;
        };
        let owner = req.owner.to_hex();
        let (handed, wake) = turns.gave_up(req.name.as_str(), &owner);
        if let Some(token) = handed {
            let group = GroupKey::new(req.kind.family(), req.name.as_str());
            let left = self
                .driver
                .leave(&group, &owner, FencingToken::from_i64(token));
            let _ = self.bounded("release", left).await;
        }
        if wake {
            self.signals.wake(req.kind.family(), &req.name);
        }
    }
}
