//! Backends made from a client or pool the application already has
//! (`SqlBackend::from_pool`, `RedisBackend::from_client`,
//! `RedlockBackend::from_clients`, `EtcdBackend::from_client`,
//! `ZkBackend::from_client`): the whole
//! conformance suite on each, where the `multi_process` case's other
//! processes reach the same locks by URL; a lock, extend, release cycle
//! excluding and excluded by a backend made from the URL; and what each
//! constructor checks of the client it is given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::SqlServer;
use conformance_tests::servers::etcd::Etcd;
use conformance_tests::servers::mariadb::Mariadb;
use conformance_tests::servers::postgres::Postgres;
use conformance_tests::servers::redis::{Redis, RedisSet};
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use conformance_tests::{Target, conformance_suite};
use distlock::backends::etcd::{EtcdBackend, EtcdConfig};
use distlock::backends::redis::RedisBackend;
use distlock::backends::redis::RedisConfig;
use distlock::backends::redlock::RedlockBackend;
use distlock::backends::redlock::RedlockConfig;
use distlock::backends::sql::{SqlBackend, SqlConfig};
use distlock::backends::zk::{ZkBackend, ZkConfig};
use lock_core::backend::{LockBackend, async_trait};
use lock_core::{AcquireOptions, Error, Fencing, LockState, Locker, Wait};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use zookeeper_client as zk;

type Connect =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn LockBackend>> + Send>> + Send + Sync>;

/// A lock service whose clients are backends made from a client or pool
/// the test makes, as an application would; `url` reaches the same locks.
struct OwnClientTarget {
    label: &'static str,
    url: String,
    connect: Connect,
    _dir: Option<tempfile::TempDir>,
}

#[async_trait]
impl Target for OwnClientTarget {
    fn label(&self) -> &str {
        self.label
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        (self.connect)().await
    }

    fn url(&self) -> Option<String> {
        Some(self.url.clone())
    }
}

fn boxed<F>(backend: F) -> Pin<Box<dyn Future<Output = Arc<dyn LockBackend>> + Send>>
where
    F: Future<Output = lock_core::Result<Arc<dyn LockBackend>>> + Send + 'static,
{
    Box::pin(async move {
        backend
            .await
            .expect("a backend from the application's client")
    })
}

/// An SQLite pool as an application would open one: WAL, sqlx's default
/// `synchronous` (FULL) and busy timeout (5 s).
async fn sqlite_pool(path: &std::path::Path) -> SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    SqlitePool::connect_with(options)
        .await
        .expect("open the pool")
}

impl OwnClientTarget {
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("locks.db");
        let table = fresh_table();
        let url = format!("sqlite://{}?table={table}", path.display());
        Self {
            label: "sqlite_pool",
            url,
            connect: Box::new(move || {
                let (path, table) = (path.clone(), table.clone());
                boxed(async move {
                    let pool = sqlite_pool(&path).await;
                    let backend = SqlBackend::from_pool(pool, SqlConfig::default().table(table));
                    Ok(Arc::new(backend.await?) as Arc<dyn LockBackend>)
                })
            }),
            _dir: Some(dir),
        }
    }

    async fn postgres() -> Self {
        let server = Postgres::shared().await;
        let table = fresh_table();
        let base = server.url("");
        Self {
            label: "postgres_pool",
            url: server.url(&format!("table={table}")),
            connect: Box::new(move || {
                let (base, table) = (base.clone(), table.clone());
                boxed(async move {
                    let pool = sqlx::PgPool::connect(&base).await.expect("open the pool");
                    let backend = SqlBackend::from_pool(pool, SqlConfig::default().table(table));
                    Ok(Arc::new(backend.await?) as Arc<dyn LockBackend>)
                })
            }),
            _dir: None,
        }
    }

    async fn mariadb() -> Self {
        let server = Mariadb::shared().await;
        let table = fresh_table();
        let base = mysql_url(server);
        Self {
            label: "mariadb_pool",
            url: server.url(&format!("table={table}")),
            connect: Box::new(move || {
                let (base, table) = (base.clone(), table.clone());
                boxed(async move {
                    let pool = sqlx::MySqlPool::connect(&base)
                        .await
                        .expect("open the pool");
                    let backend = SqlBackend::from_pool(pool, SqlConfig::default().table(table));
                    Ok(Arc::new(backend.await?) as Arc<dyn LockBackend>)
                })
            }),
            _dir: None,
        }
    }

    async fn redis() -> Self {
        let server = Redis::shared().await;
        let prefix = format!("{}:", fresh_table());
        let base = server.url("");
        Self {
            label: "redis_client",
            url: server.url(&format!("prefix={prefix}")),
            connect: Box::new(move || {
                let (base, prefix) = (base.clone(), prefix.clone());
                boxed(async move {
                    let client = redis::Client::open(base).expect("a redis client");
                    let backend =
                        RedisBackend::from_client(client, RedisConfig::default().prefix(prefix));
                    Ok(Arc::new(backend.await?) as Arc<dyn LockBackend>)
                })
            }),
            _dir: None,
        }
    }

    async fn redlock() -> Self {
        let set = RedisSet::shared().await;
        let prefix = format!("{}:", fresh_table());
        let bases: Vec<String> = set.nodes.iter().map(|node| node.url("")).collect();
        Self {
            label: "redlock_clients",
            url: set.url(&format!("prefix={prefix}")),
            connect: Box::new(move || {
                let (bases, prefix) = (bases.clone(), prefix.clone());
                boxed(async move {
                    let clients = bases
                        .iter()
                        .map(|url| redis::Client::open(url.as_str()).expect("a redis client"));
                    let options = RedlockConfig::default().prefix(prefix);
                    let backend = RedlockBackend::from_clients(clients, options);
                    Ok(Arc::new(backend.await?) as Arc<dyn LockBackend>)
                })
            }),
            _dir: None,
        }
    }

    async fn etcd() -> Self {
        let server = Etcd::shared().await;
        let prefix = fresh_table();
        let endpoints = server.endpoints();
        Self {
            label: "etcd_client",
            url: server.url(&prefix, ""),
            connect: Box::new(move || {
                let (endpoints, prefix) = (endpoints.clone(), prefix.clone());
                boxed(async move {
                    let client = etcd_client(&endpoints).await;
                    let backend =
                        EtcdBackend::from_client(client, EtcdConfig::default().prefix(prefix));
                    Ok(Arc::new(backend.await?) as Arc<dyn LockBackend>)
                })
            }),
            _dir: None,
        }
    }

    async fn zk() -> Self {
        let server = ZooKeeper::shared().await;
        let chroot = fresh_table();
        let hosts = server.connect_string();
        Self {
            label: "zk_client",
            url: server.url(&chroot, ""),
            connect: Box::new(move || {
                let (hosts, chroot) = (hosts.clone(), chroot.clone());
                boxed(async move {
                    let client = zk_client(&hosts).await;
                    let backend =
                        ZkBackend::from_client(client, ZkConfig::default().chroot(chroot));
                    Ok(Arc::new(backend.await?) as Arc<dyn LockBackend>)
                })
            }),
            _dir: None,
        }
    }
}

/// sqlx knows MariaDB by the `mysql` scheme only.
fn mysql_url(server: &dyn SqlServer) -> String {
    let url = server.url("");
    match url.split_once("://") {
        Some((_, rest)) => format!("mysql://{rest}"),
        None => url,
    }
}

async fn etcd_client(endpoints: &str) -> ::etcd_client::Client {
    let endpoints: Vec<&str> = endpoints.split(',').collect();
    let options = ::etcd_client::ConnectOptions::new()
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3));
    ::etcd_client::Client::connect(endpoints, Some(options))
        .await
        .expect("an etcd client")
}

async fn zk_client(hosts: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(hosts)
        .await
        .expect("a ZooKeeper session")
}

conformance_suite!(sqlite_pool, async { OwnClientTarget::sqlite() });
conformance_suite!(postgres_pool, OwnClientTarget::postgres());
conformance_suite!(mariadb_pool, OwnClientTarget::mariadb());
conformance_suite!(redis_client, OwnClientTarget::redis());
conformance_suite!(redlock_clients, OwnClientTarget::redlock());
conformance_suite!(etcd_client, OwnClientTarget::etcd());
conformance_suite!(zk_client, OwnClientTarget::zk());

/// A lock taken through the application's client excludes a backend made
/// from the URL, is extended and checked on the server, and once released
/// goes to the URL's backend with a greater token, which in turn excludes
/// the application's client.
async fn excludes_and_is_excluded_by_the_url_backend(target: OwnClientTarget) {
    let name = format!("byo-{}", fresh_table());
    let own = Locker::from_arc(target.client().await);
    let by_url = Locker::from_arc(
        distlock::connect_backend(&target.url)
            .await
            .expect("the URL's backend"),
    );
    let ttl = own.capabilities().min_ttl.max(Duration::from_secs(3));
    let opts = |wait| AcquireOptions::with_ttl(ttl).wait(wait);

    let guard = own.lock_with(&name, opts(Wait::No)).await.expect("granted");
    let busy = by_url.lock_with(&name, opts(Wait::No)).await;
    assert!(
        matches!(busy, Err(Error::Busy { .. })),
        "{}: the URL's backend must see the lock held: {busy:?}",
        target.label
    );
    let extended = guard.extend(ttl * 2).await.expect("extend");
    assert_eq!(extended.token(), guard.token(), "extend keeps the grant");
    assert!(guard.is_held().await.expect("is_held"), "still ours");
    let holder = by_url.holder(&name).await.expect("holder");
    assert!(
        holder.is_some(),
        "{}: the URL's backend sees a holder",
        target.label
    );
    let first = guard.token();
    guard.release().await.expect("release");

    let theirs = by_url
        .lock_with(&name, opts(Wait::For(Duration::from_secs(10))))
        .await
        .expect("the URL's backend takes the released lock");
    if own.capabilities().fencing == Fencing::Strict {
        assert!(theirs.token() > first, "tokens increase across the two");
    }
    let busy = own.lock_with(&name, opts(Wait::No)).await;
    assert!(
        matches!(busy, Err(Error::Busy { .. })),
        "{}: the application's client must see the lock held: {busy:?}",
        target.label
    );
    theirs.release().await.expect("release");
    own.lock_with(&name, opts(Wait::No))
        .await
        .expect("free again")
        .release()
        .await
        .expect("release");
}

mod interop {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        excludes_and_is_excluded_by_the_url_backend(OwnClientTarget::sqlite()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        excludes_and_is_excluded_by_the_url_backend(OwnClientTarget::postgres().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mariadb() {
        excludes_and_is_excluded_by_the_url_backend(OwnClientTarget::mariadb().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis() {
        excludes_and_is_excluded_by_the_url_backend(OwnClientTarget::redis().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redlock() {
        excludes_and_is_excluded_by_the_url_backend(OwnClientTarget::redlock().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd() {
        excludes_and_is_excluded_by_the_url_backend(OwnClientTarget::etcd().await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zk() {
        excludes_and_is_excluded_by_the_url_backend(OwnClientTarget::zk().await).await;
    }
}

/// The fencing of a backend on an SQLite pool follows the pool's
/// `synchronous`, as a URL's `synchronous` does.
#[tokio::test]
async fn sqlite_fencing_follows_the_pools_synchronous() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (SqliteSynchronous::Full, Fencing::Strict),
        (SqliteSynchronous::Extra, Fencing::Strict),
        (SqliteSynchronous::Normal, Fencing::BestEffort),
        (SqliteSynchronous::Off, Fencing::BestEffort),
    ];
    for (synchronous, fencing) in cases {
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("locks.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous);
        let pool = SqlitePool::connect_with(options).await.unwrap();
        let backend = SqlBackend::from_pool(pool, SqlConfig::default())
            .await
            .unwrap();
        assert_eq!(backend.capabilities().fencing, fencing, "{synchronous:?}");
    }
}

/// A locker on a pool of a fresh SQLite file in `dir` whose connections
/// have no busy timeout, so that two writes that meet fail at once with
/// "database is locked". Every connection is opened first, and none is
/// closed after: opening one reads the file under a lock, and would meet
/// the writes as well. sqlx closes a connection whose acquire is cut while
/// it tests it before handing it out, so it does not test them (as
/// lock-sql's own pools do not).
async fn locker_failing_on_collisions(dir: &std::path::Path) -> Locker {
    const CONNECTIONS: u32 = 8;
    let options = SqliteConnectOptions::new()
        .filename(dir.join("locks.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::ZERO);
    let pool = SqlitePoolOptions::new()
        .max_connections(CONNECTIONS)
        .test_before_acquire(false)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await
        .unwrap();
    let mut opened = Vec::new();
    for _ in 0..CONNECTIONS {
        opened.push(pool.acquire().await.unwrap());
    }
    drop(opened);
    Locker::new(
        SqlBackend::from_pool(pool, SqlConfig::default())
            .await
            .unwrap(),
    )
}

/// A read-write lock's writes from one backend on SQLite queue in the
/// process instead of meeting in SQLite's busy handler: on a pool with no
/// busy timeout, where every collision fails at once with "database is
/// locked", a writer and three readers taking turns on one lock see no
/// error, releases included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_read_write_writes_never_collide_within_one_backend() {
    let dir = tempfile::tempdir().unwrap();
    let locker = locker_failing_on_collisions(dir.path()).await;
    let ttl = Duration::from_secs(30);
    let sides: Vec<_> = (0..4)
        .map(|i| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let rw = locker.rwlock("queued");
                let side = if i == 0 { "write" } else { "read" };
                for round in 0..150 {
                    let opts = AcquireOptions::with_ttl(ttl).wait(Wait::For(ttl));
                    let guard = if i == 0 {
                        rw.write_with(opts).await
                    } else {
                        rw.read_with(opts).await
                    };
                    let guard = guard.unwrap_or_else(|e| panic!("{side} {round}: {e}"));
                    guard
                        .release()
                        .await
                        .unwrap_or_else(|e| panic!("{side} release {round}: {e}"));
                }
            })
        })
        .collect();
    for side in sides {
        side.await.expect("no side failed");
    }
}

/// A queued write's turn lasts until SQLite is done with it, not until its
/// caller stops waiting: a release stops its guard's keep-alive, whose
/// renewal may be in flight, and its own write must not start beside that
/// renewal's. On a pool with no busy timeout, where a collision fails at
/// once with "database is locked", guards held for about as long as their
/// keep-alive waits to renew (a third of the TTL) release with no such
/// error. A lease a stall on a busy machine let run out is not a collision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_read_write_release_waits_for_a_renewal_it_cuts_short() {
    let dir = tempfile::tempdir().unwrap();
    let locker = locker_failing_on_collisions(dir.path()).await;
    let ttl = Duration::from_millis(150);
    let holders: Vec<_> = (0..4u64)
        .map(|i| {
            let locker = locker.clone();
            tokio::spawn(async move {
                // A name each: the writes meet only in the backend's queue.
                let rw = locker.rwlock(format!("renewed-{i}"));
                for round in 0..50u64 {
                    let opts =
                        AcquireOptions::with_ttl(ttl).wait(Wait::For(Duration::from_secs(10)));
                    let guard = if i % 2 == 0 {
                        rw.write_with(opts).await
                    } else {
                        rw.read_with(opts).await
                    };
                    let guard = guard.unwrap_or_else(|e| panic!("{i} acquire {round}: {e}"));
                    let hold =
                        ttl / 3 + Duration::from_millis((round + i) % 5) - Duration::from_millis(2);
                    tokio::time::sleep(hold).await;
                    match guard.release().await {
                        Err(e) if !e.is_lost() => panic!("{i} release {round}: {e}"),
                        _ => {}
                    }
                }
            })
        })
        .collect();
    for holder in holders {
        holder.await.expect("no holder failed");
    }
}

/// PostgreSQL's listener has a connection of its own: on pools of one
/// connection, statements still run, and a release in one backend wakes a
/// waiter of another through `LISTEN` (the waiter's backend released
/// nothing, so each of its wake-ups is a server notice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pools_of_one_keep_their_connection_and_hear_releases() {
    let server = Postgres::shared().await;
    let options = SqlConfig::default()
        .table(fresh_table())
        .schema(format!("s_{}", fresh_table()));
    let pool_of_one = || async {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(2))
            .connect(&server.url(""))
            .await
            .unwrap()
    };
    let (holder_pool, waiter_pool) = (pool_of_one().await, pool_of_one().await);
    let holder = Locker::new(
        SqlBackend::from_pool(holder_pool.clone(), options.clone())
            .await
            .unwrap(),
    );
    let waiter = Locker::new(SqlBackend::from_pool(waiter_pool, options).await.unwrap());
    let name = format!("one-{}", fresh_table());
    let ttl = Duration::from_secs(10);
    let guard = holder
        .lock_with(&name, AcquireOptions::with_ttl(ttl).wait(Wait::No))
        .await
        .expect("granted on a pool of one");
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            waiter
                .lock_with(&name, AcquireOptions::with_ttl(ttl).wait(Wait::For(ttl)))
                .await
                .expect("the waiter's turn")
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.expect("release");
    let granted = waiting.await.unwrap();
    assert!(
        waiter.stats().wakeups >= 1,
        "the release was heard through LISTEN: {:?}",
        waiter.stats()
    );
    granted.release().await.unwrap();
    assert_eq!(holder_pool.size(), 1, "the pool kept its one connection");
}

/// Options are checked as a URL's are, before anything is sent.
#[tokio::test]
async fn bad_options_are_refused_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let pool = sqlite_pool(&dir.path().join("locks.db")).await;
    let err = SqlBackend::from_pool(pool.clone(), SqlConfig::default().table("locks; drop"))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let err = SqlBackend::from_pool(pool, SqlConfig::default().schema("s"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("PostgreSQL only"), "{err}");
    let unreachable = redis::Client::open("redis://127.0.0.1:1").unwrap();
    let err = RedisBackend::from_client(unreachable.clone(), RedisConfig::default().prefix("a b"))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let twice = [unreachable.clone(), unreachable.clone(), unreachable];
    let err = RedlockBackend::from_clients(twice, RedlockConfig::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("listed twice"), "{err}");
}

/// A ZooKeeper backend cannot replace a session it was given. The
/// application's client reaches the server through a proxy that stalls
/// until the session expires: the backend's lock is lost before the
/// server frees it for a backend made from the URL, and once the client
/// sees its session expired, every later call fails at once, saying why;
/// an ended session is refused outright.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_backend_ends_with_the_session_it_was_given() {
    let server = ZooKeeper::shared().await;
    let proxy = Proxy::start(server.servers[0].port()).await;
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_millis(1500))
        .connect(&format!("127.0.0.1:{}", proxy.port()))
        .await
        .expect("a ZooKeeper session through the proxy");
    let chroot = fresh_table();
    let options = ZkConfig::default()
        .chroot(&chroot)
        .timeout(Duration::from_millis(300));
    let backend = ZkBackend::from_client(client.clone(), options)
        .await
        .unwrap();
    assert_eq!(backend.session_id(), Some(client.session_id().0));
    let locker = Locker::new(backend);
    let by_url = Locker::from_arc(
        distlock::connect_backend(&server.url(&chroot, ""))
            .await
            .unwrap(),
    );
    let name = format!("gone-{}", fresh_table());
    let ttl = Duration::from_secs(3);
    let guard = locker
        .lock_with(&name, AcquireOptions::with_ttl(ttl).wait(Wait::No))
        .await
        .unwrap();
    // The lock's node lies below the chroot, in the client's tree.
    let nodes = client
        .list_children(&format!("/{chroot}/locks/{name}"))
        .await
        .unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");

    proxy.set(Fault::Stall);
    let theirs = by_url
        .lock_with(
            &name,
            AcquireOptions::with_ttl(ttl).wait(Wait::For(Duration::from_secs(20))),
        )
        .await
        .expect("granted once the application's session expired");
    assert_eq!(
        guard.state(),
        LockState::Lost,
        "lost before the lock moved on"
    );
    proxy.set(Fault::None);
    tokio::time::timeout(Duration::from_secs(10), async {
        while !client.state().is_terminated() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the application's client sees its session expired");
    assert!(
        guard.release().await.is_err(),
        "a lost lock's release says so"
    );
    let started = tokio::time::Instant::now();
    let err = locker
        .lock_with(
            &name,
            AcquireOptions::with_ttl(ttl).wait(Wait::For(Duration::from_secs(5))),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("make a new client") && !err.is_retryable(),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(1), "failed at once");
    let err = ZkBackend::from_client(client, ZkConfig::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("from_client"), "{err}");
    theirs.release().await.unwrap();
}
