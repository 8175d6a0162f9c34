//! No secret leaks, on real servers. A ZooKeeper password can come from a
//! file (`password_file=`). And no owner token whole in the logs: every event at debug level is captured
//! (a global subscriber writing to a buffer) while a ZooKeeper lease expires
//! and while etcd deletes a grant that expired unrenewed, on real servers.
//! Node names and keys that carry a token must show a short holder id only,
//! in distlock's events and in the drivers' (zookeeper-client prints every
//! request's path at debug level: node names do not carry the token).

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use conformance_tests::servers::etcd::Etcd;
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use distlock::backends::etcd::EtcdBackend;
use distlock::backends::zk::ZkBackend;
use lock_core::LockName;
use lock_core::backend::OwnerToken;
use lock_core::backend::{AcquireRequest, LockBackend};
use tokio::time::{Instant, sleep};

/// Everything logged in this test binary.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The one subscriber of this binary (tasks run on any thread, so a
/// thread-local one would miss them).
fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        captured
    })
}

/// The forms an owner token takes on the servers: its hex, Curator's UUID
/// (ZooKeeper node names) and etcd's key ID (63 of its bits).
fn whole_forms(owner: OwnerToken) -> Vec<String> {
    let hex = owner.to_hex();
    let uuid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let key_id = format!("{:x}", ((owner.to_u128() as u64) >> 1).max(1));
    vec![hex, uuid, key_id]
}

/// Waits until `line` (a message) was logged with `holder` on the same line,
/// then checks that no form of `owner` was logged anywhere.
async fn logged_without_token(line: &str, holder: &str, owner: OwnerToken) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = logs().text();
        if text.lines().any(|l| l.contains(line) && l.contains(holder)) {
            for form in whole_forms(owner) {
                assert!(
                    !text.contains(&form),
                    "the owner token ({form}) is in the logs:\n{text}"
                );
            }
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no \"{line}\" naming {holder} in 30 s:\n{text}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_zookeeper_lease_is_logged_by_its_holder_id() {
    logs();
    let zk = ZooKeeper::shared().await;
    let backend = ZkBackend::connect(&zk.url(&fresh_table(), ""))
        .await
        .expect("connect");
    let mut req = AcquireRequest::new(
        LockName::new("expiring").unwrap(),
        Duration::from_millis(300),
    );
    req.owner = OwnerToken::random();
    let lease = backend
        .try_acquire(&req)
        .await
        .unwrap()
        .expect("a free lock");
    // Never renewed: the backend deletes its node once the deadline passes.
    let owner = lease.owner();
    let text = logged_without_token(
        "lease not renewed in time; deleting its node",
        &format!("_c_{}…", owner.short()),
        owner,
    )
    .await;
    assert!(text.contains("DEBUG"), "{text}");
    let node = format!("_c_{}", owner.short());
    assert!(
        text.lines()
            .any(|l| l.contains("zookeeper_client") && l.contains(&node)),
        "the driver's own debug events, which print node paths, are checked too:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_cleanup_logs_keys_by_a_short_id() {
    logs();
    let etcd = Etcd::shared().await;
    let url = etcd.url(&fresh_table(), "");
    let backend = Arc::new(EtcdBackend::connect(&url).await.expect("connect"));
    let name = LockName::new("expiring").unwrap();
    let ttl = distlock::backends::etcd::MIN_TTL;
    let req = AcquireRequest::new(name.clone(), ttl);
    let lease = backend
        .try_acquire(&req)
        .await
        .unwrap()
        .expect("a free lock");
    let owner = lease.owner();
    // Never renewed; another lock, renewed, keeps the session's lease
    // alive: the keep-alive after the first lock's deadline deletes its key.
    let locker = lock_core::Locker::from_arc(backend.clone());
    let _kept = locker
        .lock_with("kept", lock_core::AcquireOptions::with_ttl(ttl))
        .await
        .unwrap();
    sleep(ttl).await;
    let other = AcquireRequest::new(name, distlock::backends::etcd::MIN_TTL);
    let deadline = Instant::now() + Duration::from_secs(30);
    while backend.try_acquire(&other).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "the expired grant stayed");
        sleep(Duration::from_millis(100)).await;
    }
    let key_id = format!("{:x}", ((owner.to_u128() as u64) >> 1).max(1));
    logged_without_token(
        "deleting orphaned and expired keys",
        &format!("/{}…", &key_id[..8]),
        owner,
    )
    .await;
}

/// `auth=digest:USER&password_file=PATH`: the session authenticates with
/// the file's password (its nodes get that identity's creator-only ACL, so
/// the same identity given inline can release them, another cannot); a
/// missing file is a clear error naming ZooKeeper and the option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_password_can_come_from_a_file() {
    let zk = ZooKeeper::shared().await;
    let chroot = fresh_table();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zk-password");
    std::fs::write(&file, "s3cret-from-file\n").unwrap();
    let url = |auth: &str| zk.url(&chroot, auth);
    let from_file = ZkBackend::connect(&url(&format!(
        "auth=digest:bob&password_file={}",
        file.display()
    )))
    .await
    .expect("connect with the password file");
    let req = AcquireRequest::new(LockName::new("filed").unwrap(), Duration::from_secs(30));
    let lease = from_file.try_acquire(&req).await.unwrap().expect("free");
    let stranger = ZkBackend::connect(&url("auth=digest:bob:another"))
        .await
        .unwrap();
    assert!(
        stranger.release(&lease).await.is_err(),
        "another password may not delete the node"
    );
    let same = ZkBackend::connect(&url("auth=digest:bob:s3cret-from-file"))
        .await
        .unwrap();
    same.release(&lease)
        .await
        .expect("the same identity, given inline");
    let missing = format!(
        "auth=digest:bob&password_file={}",
        dir.path().join("missing").display()
    );
    let err = match ZkBackend::connect(&url(&missing)).await {
        Err(e) => e,
        Ok(backend) => backend.try_acquire(&req).await.unwrap_err(),
    };
    let text = err.to_string();
    assert!(
        text.contains("zookeeper")
            && text.contains("password_file")
            && text.contains("cannot read"),
        "{text}"
    );
}
