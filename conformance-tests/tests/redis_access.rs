//! Redis shared by teams whose credentials must not reach each other's
//! locks: an ACL user per team, allowed its own key and channel prefix and
//! the commands distlock sends, and nothing else (the rule lock-redis's
//! README gives). The core cases run as such a user; another team's user
//! can neither read, renew, release, take nor delete a held lock. And on
//! every topology (one server, Cluster, Sentinel, Redlock) the password can
//! come from a file (`password_file=`), so that no URL shows it.

use std::time::Duration;

use conformance_tests::access::another_identity_is_refused;
use conformance_tests::servers::redis::{Redis, RedisSet};
use conformance_tests::servers::redis_cluster::RedisCluster;
use conformance_tests::servers::redis_sentinel::RedisSentinel;
use conformance_tests::targets::{UrlTarget, fresh_table};
use conformance_tests::{Verdict, cases};
use lock_core::{AcquireOptions, Locker, Wait};
use redis::AsyncCommands;

/// The commands distlock sends, as lock-redis's README lists them.
const COMMANDS: &str = "-@all +eval +evalsha +script|load +wait +info +ping +publish +subscribe \
                        +unsubscribe +get +mget +set +del +exists +incr +pexpire +pexpireat \
                        +pexpiretime +pttl +time +hget +hset +hdel +zadd +zcard +zrangebyscore \
                        +zrem +zremrangebyscore +zscore";

const TTL: Duration = Duration::from_secs(10);

/// Adds (or resets) `user`, allowed keys and channels under `prefix`.
async fn add_user(server: &Redis, user: &str, password: &str, prefix: &str) {
    let admin = redis::Client::open(server.url("")).expect("the admin URL");
    let mut admin = admin
        .get_multiplexed_async_connection()
        .await
        .expect("connect as the admin");
    let mut rule = redis::cmd("ACL");
    rule.arg("SETUSER").arg(user).arg("reset").arg("on");
    rule.arg(format!(">{password}"))
        .arg(format!("~{prefix}*"))
        .arg(format!("&{prefix}*"));
    for command in COMMANDS.split_whitespace() {
        rule.arg(command);
    }
    let () = rule.query_async(&mut admin).await.expect("ACL SETUSER");
}

/// A URL as `user`, with key prefix `prefix`.
fn url_as(server: &Redis, user: &str, password: &str, prefix: &str) -> String {
    format!(
        "redis://{user}:{password}@127.0.0.1:{}?prefix={prefix}",
        server.port()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_cases_pass_as_a_least_privilege_user() {
    let server = Redis::shared().await;
    let prefix = format!("{}:", fresh_table());
    add_user(server, "team-core", "core-pw", &prefix).await;
    let target = UrlTarget::new("redis_acl", url_as(server, "team-core", "core-pw", &prefix));
    assert_eq!(cases::mutual_exclusion(&target).await, Verdict::Passed);
    assert_eq!(
        cases::try_acquire_on_held_lock(&target).await,
        Verdict::Passed
    );
    assert_eq!(
        cases::renew_extends_only_for_the_owner(&target).await,
        Verdict::Passed
    );
    assert_eq!(
        cases::non_owner_release_never_deletes(&target).await,
        Verdict::Passed
    );
    assert_eq!(
        cases::fencing_tokens_strictly_increase(&target).await,
        Verdict::Passed
    );
    assert_eq!(
        cases::ttl_expiry_frees_crashed_holder(&target).await,
        Verdict::Passed
    );
    assert_eq!(
        cases::semaphore_admits_at_most_n(&target).await,
        Verdict::Passed
    );
    assert_eq!(
        cases::readers_share_writer_excludes(&target).await,
        Verdict::Passed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_team_cannot_touch_a_held_lock() {
    let server = Redis::shared().await;
    let (a, b) = (format!("{}:", fresh_table()), format!("{}:", fresh_table()));
    add_user(server, "team-a", "a-pw", &a).await;
    add_user(server, "team-b", "b-pw", &b).await;
    let connect =
        |url: String| async move { distlock::connect_backend(&url).await.expect("connect") };
    let alice = connect(url_as(server, "team-a", "a-pw", &a)).await;
    // Team b's credentials, pointed at team a's prefix.
    let bob = connect(url_as(server, "team-b", "b-pw", &a)).await;
    another_identity_is_refused(alice.clone(), bob, &["a-pw", "b-pw"]).await;

    // By hand, with team b's own connection.
    let guard = Locker::from_arc(alice)
        .lock_with("by-hand", AcquireOptions::with_ttl(TTL).wait(Wait::No))
        .await
        .expect("free");
    let plain = redis::Client::open(format!("redis://team-b:b-pw@127.0.0.1:{}", server.port()))
        .expect("team b's URL");
    let mut plain = plain
        .get_multiplexed_async_connection()
        .await
        .expect("team b connects by hand");
    let key = format!("{a}by-hand");
    let read: redis::RedisResult<Option<String>> = plain.get(&key).await;
    assert!(read.is_err(), "team b read {key}: {read:?}");
    let deleted: redis::RedisResult<i64> = plain.del(&key).await;
    assert!(deleted.is_err(), "team b deleted {key}: {deleted:?}");
    assert!(
        guard.is_held().await.expect("is_held"),
        "team a lost its lock"
    );
    guard.release().await.expect("team a releases");
}

/// `url` with every password taken out of its user-info, and
/// `password_file=file` added; the password it had.
fn password_in_file(url: &str, file: &std::path::Path) -> (String, String) {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut password = None;
    let hosts: Vec<String> = hosts
        .split(',')
        .map(|host| match host.split_once('@') {
            Some((userinfo, at)) => {
                let (user, pw) = userinfo.split_once(':').expect("a password in the URL");
                password = Some(pw.to_owned());
                format!("{user}@{at}")
            }
            None => host.to_owned(),
        })
        .collect();
    let option = format!("password_file={}", file.display());
    let query = [query, option.as_str()]
        .into_iter()
        .filter(|q| !q.is_empty())
        .collect::<Vec<_>>()
        .join("&");
    let url = format!("{scheme}://{}?{query}", hosts.join(","));
    (url, password.expect("a password in the URL"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_topology_reads_its_password_from_a_file() {
    let prefix = format!("prefix={}:", fresh_table());
    let urls = [
        Redis::shared().await.url(&prefix),
        RedisCluster::shared().await.url(&prefix),
        RedisSentinel::shared().await.url(&prefix),
        RedisSet::shared().await.url(&prefix),
    ];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redis-password");
    for url in urls {
        let (url, password) = password_in_file(&url, &file);
        assert!(!url.contains(&password), "{url}");
        std::fs::write(&file, format!("{password}\n")).unwrap();
        let backend = distlock::connect_backend(&url)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", url.split_once("://").unwrap().0));
        let guard = Locker::from_arc(backend)
            .lock_with("filed", AcquireOptions::with_ttl(TTL).wait(Wait::No))
            .await
            .expect("free");
        guard.release().await.expect("release");

        std::fs::write(&file, "not-the-password\n").unwrap();
        let refused = match distlock::connect_backend(&url).await {
            Err(e) => e,
            Ok(backend) => Locker::from_arc(backend)
                .try_lock("filed")
                .await
                .expect_err("a wrong password gets in"),
        };
        assert!(
            !refused.to_string().contains("not-the-password"),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .contains("Password authentication failed"),
            "{refused}"
        );
        assert!(!refused.is_retryable(), "{refused:?}");

        let missing = url.replace("redis-password", "missing");
        let err = match distlock::connect_backend(&missing).await {
            Err(e) => e,
            Ok(_) => panic!("connected without the password file"),
        };
        let text = err.to_string();
        assert!(
            text.contains("password_file") && text.contains("cannot read"),
            "{text}"
        );
    }
}
