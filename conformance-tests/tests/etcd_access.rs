//! etcd with authentication on, as a shared lock store of several teams:
//! each team's user has a role that may read and write its own key prefix
//! only. A user of another team can neither take, renew, release, delete
//! nor read the owner of a lock under a prefix that is not its own: each
//! is a clear error, and the holder keeps its lock. A wrong password is a
//! clear error that does not show it.

use std::time::Duration;

use conformance_tests::servers::etcd_auth::{EtcdAuth, TEAMS};
use conformance_tests::targets::fresh_table;
use distlock::lock_etcd::EtcdBackend;
use lock_core::backend::LockBackend;
use lock_core::{AcquireOptions, Error, LockName, Locker, Wait};

const TTL: Duration = Duration::from_secs(4);

fn refused(what: &str, outcome: Result<impl std::fmt::Debug, Error>) {
    let error = match outcome {
        Ok(v) => panic!("{what}: allowed ({v:?})"),
        Err(e) => e,
    };
    let text = error.to_string();
    eprintln!("{what}: {text}");
    assert!(
        text.contains("etcd") && text.contains("permission denied"),
        "{what}: {text}"
    );
    assert!(!error.is_retryable(), "{what}: {error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_team_cannot_touch_a_held_lock() {
    let etcd = EtcdAuth::shared().await;
    let ((alice, team_a), (bob, team_b)) = (TEAMS[0], TEAMS[1]);
    let path = format!("{team_a}{}", fresh_table());
    let owner = Locker::new(
        EtcdBackend::connect(&etcd.url_as(alice, &path, ""))
            .await
            .expect("alice connects"),
    );
    let mut guard = owner
        .lock_with("job", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect("alice locks under her prefix");
    let lease = guard.lease();

    // Bob, aimed at alice's prefix.
    let intruder = EtcdBackend::connect(&etcd.url_as(bob, &path, ""))
        .await
        .expect("bob connects (the status request needs no key rights)");
    let name = LockName::new("job").unwrap();
    refused("read the owner", intruder.holder(&name).await);
    refused("release", intruder.release(&lease).await);
    let renewed = intruder.renew(&lease, TTL).await;
    assert!(
        renewed.is_err(),
        "renew of a lease bob's client never granted: {renewed:?}"
    );
    let other = Locker::new(intruder.clone());
    refused(
        "take",
        other
            .lock_with("job", AcquireOptions::with_ttl(TTL).wait(Wait::No))
            .await,
    );

    // Bob's own client, straight at the keys.
    let mut raw = etcd_client::Client::connect(
        [etcd.etcd.endpoints()],
        Some(etcd_client::ConnectOptions::new().with_user(bob, etcd.password_of(bob))),
    )
    .await
    .expect("bob's etcd client");
    let keys = etcd_client::GetOptions::new().with_prefix();
    let deleted = raw
        .delete(
            path.clone(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await;
    assert!(deleted.is_err(), "bob deleted alice's keys: {deleted:?}");
    let read = raw.get(path.clone(), Some(keys)).await;
    assert!(read.is_err(), "bob read alice's keys: {read:?}");

    // Alice still holds, renews and releases.
    assert!(
        guard.is_held().await.expect("is_held"),
        "alice lost her lock"
    );
    let held = etcd
        .ctl_as_root(&["get", "--prefix", "--keys-only", &path])
        .expect("etcdctl as root");
    assert!(held.contains("job/"), "the key is gone: {held}");
    guard.extend(TTL).await.expect("alice renews");
    guard.release().await.expect("alice releases");

    // Bob's own prefix is his to lock.
    let own = Locker::new(
        EtcdBackend::connect(&etcd.url_as(bob, &format!("{team_b}{}", fresh_table()), ""))
            .await
            .expect("bob connects to his prefix"),
    );
    own.lock_with("job", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect("bob locks under his prefix")
        .release()
        .await
        .expect("bob releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_clearly() {
    let etcd = EtcdAuth::shared().await;
    let url = etcd
        .etcd
        .url("team-a/x", "user=alice&password=not-her-password-42");
    let error = EtcdBackend::connect(&url)
        .await
        .expect_err("a wrong password");
    let text = error.to_string();
    eprintln!("{text}");
    assert!(
        text.contains("etcd") && text.contains("authentication failed"),
        "{text}"
    );
    assert!(!text.contains("not-her-password-42"), "{text}");
    assert!(!error.is_retryable(), "{error:?}");
}
