//! What a store shared by several identities must keep: an identity
//! without rights on a lock's prefix (or chroot, or table) pointed at a
//! held lock can neither read its holder, renew, release nor take it —
//! each refused with an error no retry gets past, no secret in it — and
//! the holder keeps its lock.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::LockBackend;

use crate::kinds::Kinds;
use lock_core::{AcquireOptions, Error, LockKind, LockName, LockState, Locker, Wait};

const TTL: Duration = Duration::from_secs(10);

/// `owner` takes `name` (each kind it keeps, in turn, for the kinds the
/// backend supports); `other`, the same store and prefix under another
/// identity, tries everything on it. `secrets` must appear in no error.
pub async fn another_identity_is_refused(
    owner: Arc<dyn LockBackend>,
    other: Arc<dyn LockBackend>,
    secrets: &[&str],
) {
    let refused = |what: &str, e: Error| {
        assert!(!e.is_retryable(), "{what}: a retry would not help: {e}");
        for secret in secrets {
            assert!(
                !e.to_string().contains(secret),
                "{what}: a secret shows: {e}"
            );
        }
    };
    let locker = Locker::from_arc(owner.clone());
    let guard = locker
        .lock_with("shared", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect("free");
    let lease = guard.lease().clone();
    let name = LockName::new("shared").unwrap();
    match other.holders(&name, LockKind::Exclusive).await {
        Err(e) => refused("holder", e),
        Ok(seen) => panic!("the other identity read the holder: {seen:?}"),
    }
    match other.renew(&lease, TTL).await {
        Err(e) => refused("renew", e),
        Ok(_) => panic!("the other identity renewed the lease"),
    }
    match other.release(&lease).await {
        Err(e) => refused("release", e),
        Ok(()) => panic!("the other identity released the lock"),
    }
    let kinds = [LockKind::Exclusive, LockKind::Read, LockKind::permit(2)];
    let others = Locker::from_arc(other.clone());
    for kind in kinds
        .into_iter()
        .filter(|k| other.capabilities().supports(*k))
    {
        let opts = AcquireOptions::with_ttl(TTL).wait(Wait::No);
        match others.lock_kind("shared", kind, opts).await {
            Err(e) => refused("lock", e),
            Ok(got) => panic!("the other identity took a {kind} lock: {}", got.token()),
        }
    }
    assert_eq!(guard.state(), LockState::Held);
    assert!(
        owner.is_held(&lease).await.expect("is_held"),
        "the holder lost its lock"
    );
    guard.release().await.expect("the holder releases");
}
