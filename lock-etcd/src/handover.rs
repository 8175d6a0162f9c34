//! Hand-over between a holder and a waiter of the same backend: the
//! release of a lock whose next key is a waiter of this backend grants that
//! waiter without a read of its own (the registry is lock-core's
//! [`Handovers`]).
//!
//! The release's `Txn` deletes the holder's key and, in the same
//! transaction, reads the waiter's key. When the delete went through and
//! the waiter's key is there, with its create revision and on its session's
//! lease, the waiter holds the lock, by the queue's rule (the oldest key
//! holds it): the deleted key was the holder, so no key older than it was
//! left; the waiter's last read showed nothing between it and that key; and
//! every key put since is younger than the waiter's. That is what the
//! waiter's own read after the watch event would have established, at the
//! same revision; the grant's deadline still counts from its session's last
//! proof of life, and a waiter whose session is due for a keep-alive reads
//! as before, which proves it.
//!
//! A permit's release does the same for a semaphore's first waiter (see
//! [`release_permit`]).

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::Result;
use lock_core::backend::Handovers;

use crate::client::Core;
use crate::session::still_ours;

/// What a release checks of the waiter behind it.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) key: String,
    pub(crate) revision: i64,
    pub(crate) session: i64,
}

/// Waiters by the key each watches.
pub(crate) type EtcdHandovers = Handovers<Waiter, ()>;

/// Deletes the holder's `key` if its create revision is still `token`,
/// and hands the lock to the waiter in `handovers` watching it, if its key
/// is still there: whether the delete went through.
pub(crate) async fn release_and_hand_over(
    core: &Core,
    handovers: &EtcdHandovers,
    key: &str,
    token: i64,
) -> Result<bool> {
    delete_handing_over(
        core,
        handovers,
        key,
        token,
        |waiter| TxnOp::get(waiter.key.as_str(), None),
        |waiter, op| {
            matches!(op, TxnOpResponse::Get(got)
                if still_ours(got, waiter.revision, waiter.session))
        },
    )
    .await
}

/// What a permit's release checks and writes of the first waiter of this
/// backend whose keys ahead included the released one.
#[derive(Debug)]
pub(crate) struct PermitWaiter {
    pub(crate) key: String,
    pub(crate) revision: i64,
    pub(crate) session: i64,
    /// The key's value, which its put again keeps.
    pub(crate) owner: String,
}

/// First waiters of semaphores, by each key ahead of them.
pub(crate) type PermitHandovers = Handovers<PermitWaiter, ()>;

/// Deletes a permit's lease `key` if its create revision is still `token`
/// and, in the same `Txn`, grants the first waiter in `handovers` that
/// waits for it: the deleted key was one of the `N` oldest, and the
/// waiter's key came right after them, so it is among the `N` oldest now.
/// The grant is the waiter's own (`Permits::grant`): its key put again if
/// it is still there with its create revision, on its session. Whether the
/// delete went through.
pub(crate) async fn release_permit(
    core: &Core,
    handovers: &PermitHandovers,
    key: &str,
    token: i64,
) -> Result<bool> {
    delete_handing_over(
        core,
        handovers,
        key,
        token,
        |waiter| {
            let grant = Txn::new()
                .when([
                    Compare::create_revision(
                        waiter.key.as_str(),
                        CompareOp::Equal,
                        waiter.revision,
                    ),
                    Compare::lease(waiter.key.as_str(), CompareOp::Equal, waiter.session),
                ])
                .and_then([TxnOp::put(
                    waiter.key.as_str(),
                    waiter.owner.as_str(),
                    Some(PutOptions::new().with_ignore_lease()),
                )]);
            TxnOp::txn(grant)
        },
        |_, op| matches!(op, TxnOpResponse::Txn(txn) if txn.succeeded()),
    )
    .await
}

/// What both releases share: deletes `key` if its create revision is still
/// `token`; if a waiter in `handovers` watches it, `check` of that waiter
/// goes in the same `Txn`, and the waiter is granted when `granted` reads
/// its answer so. Whether the delete went through.
async fn delete_handing_over<W>(
    core: &Core,
    handovers: &Handovers<W, ()>,
    key: &str,
    token: i64,
    check: impl FnOnce(&W) -> TxnOp,
    granted: impl FnOnce(&W, &TxnOpResponse) -> bool,
) -> Result<bool> {
    let compare = Compare::create_revision(key, CompareOp::Equal, token);
    let Some(next) = handovers.take(key) else {
        return core.delete_if(key, compare).await;
    };
    let txn = Txn::new()
        .when([compare])
        .and_then([TxnOp::delete(key, None), check(&next.waiter)]);
    let response = core
        .call("delete our key", |mut c| async move { c.txn(txn).await })
        .await?;
    if !response.succeeded() {
        return Ok(false);
    }
    let grant = response
        .op_responses()
        .get(1)
        .is_some_and(|op| granted(&next.waiter, op));
    if grant {
        next.grant(());
    }
    Ok(true)
}
