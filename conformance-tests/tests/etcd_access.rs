//! etcd with authentication on, as a shared lock store of several teams:
//! each team's user has a role that may read and write its own key prefix
//! only. A user of another team can neither take, renew, release, delete
//! nor read the owner of a lock under a prefix that is not its own: each
//! is a clear error, and the holder keeps its lock. A wrong password is a
//! clear error that does not show it. With TLS and `--client-cert-auth`
//! the same holds of identities given by client certificates alone.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::access::another_identity_is_refused;
use conformance_tests::servers::etcd_auth::{EtcdAuth, TEAMS};
use conformance_tests::targets::fresh_table;
use distlock::backends::etcd::EtcdBackend;
use lock_core::{AcquireOptions, Locker, Wait};

const TTL: Duration = Duration::from_secs(4);

async fn backend(url: &str) -> Arc<EtcdBackend> {
    Arc::new(EtcdBackend::connect(url).await.expect("connect"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_team_cannot_touch_a_held_lock() {
    let etcd = EtcdAuth::shared().await;
    let ((alice, team_a), (bob, team_b)) = (TEAMS[0], TEAMS[1]);
    let path = format!("{team_a}{}", fresh_table());
    let owner = backend(&etcd.url_as(alice, &path, "")).await;
    // Bob, aimed at alice's prefix: he connects (the status request needs
    // no key rights), and is refused on every touch of her lock.
    let intruder = backend(&etcd.url_as(bob, &path, "")).await;
    let secrets = [etcd.password_of(alice), etcd.password_of(bob)];
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    another_identity_is_refused(owner.clone(), intruder.clone(), &secrets).await;

    // The refusal says what is missing.
    let others = Locker::from_arc(intruder);
    let error = others
        .lock_with("job", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect_err("bob is refused");
    assert!(
        error.to_string().contains("etcd") && error.to_string().contains("permission denied"),
        "{error}"
    );

    // By hand, with bob's own etcd client: alice's keys can be neither
    // read nor deleted, and root still sees her key.
    let guard = Locker::from_arc(owner)
        .lock_with("by-hand", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect("alice locks under her prefix");
    let mut raw = etcd_client::Client::connect(
        [etcd.etcd.endpoints()],
        Some(etcd_client::ConnectOptions::new().with_user(bob, etcd.password_of(bob))),
    )
    .await
    .expect("bob's etcd client");
    let deleted = raw
        .delete(
            path.clone(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await;
    assert!(deleted.is_err(), "bob deleted alice's keys: {deleted:?}");
    let read = raw
        .get(
            path.clone(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await;
    assert!(read.is_err(), "bob read alice's keys: {read:?}");
    let held = etcd
        .ctl_as_root(&["get", "--prefix", "--keys-only", &path])
        .expect("etcdctl as root");
    assert!(held.contains("by-hand/"), "the key is gone: {held}");
    assert!(
        guard.is_held().await.expect("is_held"),
        "alice lost her lock"
    );
    guard.release().await.expect("alice releases");

    // Bob's own prefix is his to lock.
    let own = Locker::from_arc(
        backend(&etcd.url_as(bob, &format!("{team_b}{}", fresh_table()), "")).await,
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

/// On a TLS-only member with `--client-cert-auth`, the client
/// certificate is the identity: alice's certificate, with no password, acts
/// as alice (her prefix is hers to lock), and bob's is refused on every
/// touch of her lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_the_identity() {
    let etcd = EtcdAuth::shared_tls().await;
    let ((alice, team_a), (bob, _)) = (TEAMS[0], TEAMS[1]);
    let path = format!("{team_a}{}", fresh_table());
    let url = etcd.url_by_certificate(alice, &path, "");
    assert!(!url.contains("password"), "{url}");
    let owner = backend(&url).await;
    let intruder = backend(&etcd.url_by_certificate(bob, &path, "")).await;
    another_identity_is_refused(owner, intruder, &[]).await;
    // A certificate of a name etcd has no user for gets nothing.
    let stranger = backend(&etcd.url_by_certificate("mallory", &path, "")).await;
    let error = Locker::from_arc(stranger)
        .lock_with("job", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect_err("no such user");
    assert!(!error.is_retryable(), "{error}");
    assert!(error.to_string().contains("permission denied"), "{error}");
}
