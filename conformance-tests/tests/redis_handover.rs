//! Redis read-write locks hand over on release: the release script admits
//! the waiters that the freed room lets in, in the same atomic step. Most
//! tests keep the waiters' client behind a proxy that they stall before the
//! release, so the waiters cannot ask again: whatever they hold after it,
//! the release gave them. Once the proxy lets their traffic through again,
//! each acquire ends with the grant the server holds for it, token and all.

mod common {
    pub(crate) mod redis;
}

use std::time::Duration;

use common::redis::{locker, opts, prefix};
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::redis::Redis;
use lock_core::{LockGuard, Locker, Result, Wait};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// A server, a locker on it, a plain client of it, and a second locker
/// whose every connection goes through a proxy.
struct Setup {
    _server: Redis,
    prefix: String,
    near: Locker,
    far: Locker,
    proxy: Proxy,
    plain: MultiplexedConnection,
}

impl Setup {
    async fn new() -> Self {
        let server = Redis::start().await;
        let prefix = prefix();
        let query = format!("prefix={prefix}");
        let proxy = Proxy::start(server.port()).await;
        let plain = redis::Client::open(server.url(""))
            .expect("a redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connect a plain client");
        Self {
            near: locker(&server.url(&query)).await,
            far: locker(&server.url_via(proxy.port(), &query)).await,
            _server: server,
            prefix,
            proxy,
            plain,
        }
    }

    /// The key of `name`'s group of `tag` (`sem`, `rw`) with `suffix`.
    fn key(&self, name: &str, tag: &str, suffix: &str) -> String {
        format!("{}{name}#{tag}{suffix}", self.prefix)
    }

    async fn members(&self, key: &str) -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.plain.clone())
            .await
            .expect("ZRANGE")
    }

    async fn token(&self, name: &str, tag: &str, owner: &str) -> Option<u64> {
        redis::cmd("HGET")
            .arg(self.key(name, tag, "#tokens"))
            .arg(owner)
            .query_async(&mut self.plain.clone())
            .await
            .expect("HGET")
    }

    /// The number after `field` in the server's `INFO section` (up to a
    /// comma, as in `cmdstat_…:calls=N,…`), if it has that field.
    async fn info(&self, section: &str, field: &str) -> Option<u64> {
        let text: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.plain.clone())
            .await
            .expect("INFO");
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split(',').next()?.trim().parse().ok())
    }

    /// Asserts that no waiter of `name`'s read-write lock is left
    /// registered, to be admitted later by nobody's wish.
    async fn nothing_left_of_the_waiters(&self, name: &str) {
        let ttls: usize = redis::cmd("HLEN")
            .arg(self.key(name, "rw", "#waiter-ttls"))
            .query_async(&mut self.plain.clone())
            .await
            .expect("HLEN");
        assert_eq!(ttls, 0, "no waiter's TTL is left");
        assert!(
            self.members(&self.key(name, "rw", "#waiters"))
                .await
                .is_empty()
        );
    }

    /// The writer of `doc`, holding, and `n` readers of `locker` waiting for
    /// it, registered to be admitted.
    async fn writer_and_waiting_readers(
        &self,
        locker: &Locker,
        n: usize,
    ) -> (LockGuard, Vec<JoinHandle<Result<LockGuard>>>) {
        let writer = self.near.rwlock("doc").write().await.expect("write");
        let readers = waiting_readers(locker, n);
        self.until_members(&self.key("doc", "rw", "#waiters"), n)
            .await;
        (writer, readers)
    }

    /// Waits until `key` has `n` members: the waiters are refused and
    /// registered to be admitted.
    async fn until_members(&self, key: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.members(key).await.len() < n {
            assert!(Instant::now() < deadline, "{key} never had {n} members");
            sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `n` readers of `locker` waiting for the read-write lock `doc`.
fn waiting_readers(locker: &Locker, n: usize) -> Vec<JoinHandle<Result<LockGuard>>> {
    (0..n)
        .map(|_| {
            let rw = locker.rwlock("doc");
            tokio::spawn(async move { rw.read_with(waiting()).await })
        })
        .collect()
}

fn waiting() -> lock_core::AcquireOptions {
    opts(Duration::from_secs(30), Wait::For(Duration::from_secs(60)))
}

/// Each admitted waiter's acquire ends with the grant the server gave it.
async fn granted_as_on_the_server(
    setup: &Setup,
    name: &str,
    tag: &str,
    waiters: Vec<JoinHandle<Result<LockGuard>>>,
) -> Vec<LockGuard> {
    let mut guards = Vec::new();
    for waiter in waiters {
        let guard = waiter.await.expect("task").expect("admitted");
        let owner = guard.lease().owner().to_hex();
        assert_eq!(
            setup.token(name, tag, &owner).await,
            Some(guard.token().get()),
            "the waiter's token is the one its grant has on the server"
        );
        guards.push(guard);
    }
    guards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_admits_every_waiting_reader() {
    let setup = Setup::new().await;
    let (writer, readers) = setup.writer_and_waiting_readers(&setup.far, 3).await;
    let waiters = setup.key("doc", "rw", "#waiters");
    let mut expected = setup.members(&waiters).await;

    setup.proxy.set(Fault::Stall);
    let written = writer.token();
    writer.release().await.expect("release");
    let mut holding = setup.members(&setup.key("doc", "rw", "")).await;
    holding.sort();
    expected.sort();
    assert_eq!(holding, expected, "the release admitted every reader");
    assert!(setup.members(&waiters).await.is_empty());

    setup.proxy.set(Fault::None);
    for guard in granted_as_on_the_server(&setup, "doc", "rw", readers).await {
        assert!(guard.token() > written, "tokens grow");
        guard.release().await.expect("release");
    }
    setup.nothing_left_of_the_waiters("doc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_readers_release_admits_the_waiting_writer() {
    let setup = Setup::new().await;
    let rw = setup.near.rwlock("doc");
    let (first, second) = (
        rw.read().await.expect("read"),
        rw.read().await.expect("read"),
    );
    let far = setup.far.rwlock("doc");
    let writer = tokio::spawn(async move { far.write_with(waiting()).await });
    let marked = setup.key("doc", "rw", "#writers-waiting");
    setup.until_members(&marked, 1).await;

    setup.proxy.set(Fault::Stall);
    first.release().await.expect("release");
    let writers = setup.key("doc", "rw", "#writers");
    assert!(
        setup.members(&writers).await.is_empty(),
        "a reader still holds"
    );
    let last = second.token();
    second.release().await.expect("release");
    assert_eq!(setup.members(&writers).await.len(), 1, "admitted");
    assert!(setup.members(&marked).await.is_empty(), "no longer waiting");
    assert!(
        rw.try_read().await.is_err_and(|e| e.is_busy()),
        "the admitted writer holds"
    );

    setup.proxy.set(Fault::None);
    let guards = granted_as_on_the_server(&setup, "doc", "rw", vec![writer]).await;
    for guard in guards {
        assert!(guard.token() > last, "tokens grow");
        guard.release().await.expect("release");
    }
}

/// Waiters of the releasing client are told by the release's reply: the
/// release announces nothing, and every one of them gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_admits_its_own_clients_waiters_announces_nothing() {
    let setup = Setup::new().await;
    let (writer, readers) = setup.writer_and_waiting_readers(&setup.near, 3).await;
    let publish = || async {
        setup
            .info("commandstats", "cmdstat_publish:calls=")
            .await
            .unwrap_or(0)
    };
    let before = publish().await;
    writer.release().await.expect("release");
    for guard in granted_as_on_the_server(&setup, "doc", "rw", readers).await {
        guard.release().await.expect("release");
    }
    assert_eq!(publish().await, before, "nothing was announced");
    setup.nothing_left_of_the_waiters("doc").await;
}

/// A waiter that gave up leaves nothing a release could admit: no grant
/// nobody waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gave_up_is_not_admitted() {
    let setup = Setup::new().await;
    let writer = setup.near.rwlock("doc").write().await.expect("write");
    let impatient = setup
        .far
        .rwlock("doc")
        .read_with(opts(
            Duration::from_secs(30),
            Wait::For(Duration::from_millis(200)),
        ))
        .await;
    assert!(impatient.is_err_and(|e| e.is_contention()));
    let waiters = setup.key("doc", "rw", "#waiters");
    assert!(setup.members(&waiters).await.is_empty(), "it left no mark");
    writer.release().await.expect("release");
    assert!(
        setup.members(&setup.key("doc", "rw", "")).await.is_empty(),
        "nobody was admitted"
    );
}

/// More readers than one step of the script admits at a time: every one is
/// admitted by the one release, each with a token of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_waiting_readers_are_admitted_at_once() {
    let setup = Setup::new().await;
    let (writer, readers) = setup.writer_and_waiting_readers(&setup.far, 300).await;
    setup.proxy.set(Fault::Stall);
    writer.release().await.expect("release");
    let holding = setup.members(&setup.key("doc", "rw", "")).await;
    assert_eq!(holding.len(), 300, "the release admitted every reader");
    setup.proxy.set(Fault::None);
    let guards = granted_as_on_the_server(&setup, "doc", "rw", readers).await;
    let mut tokens: Vec<_> = guards.iter().map(|g| g.token()).collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 300, "a token each");
    for guard in guards {
        guard.release().await.expect("release");
    }
    setup.nothing_left_of_the_waiters("doc").await;
}

/// Readers and writers of two clients taking turns many times: however
/// each got in (admitted, or granted when it asked), none is left
/// registered as a waiter once all are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_leave_no_waiter_behind() {
    let setup = Setup::new().await;
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let rw = if i % 2 == 0 { &setup.near } else { &setup.far }.rwlock("doc");
            tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = if i < 2 {
                        rw.write_with(waiting()).await
                    } else {
                        rw.read_with(waiting()).await
                    };
                    guard.expect("granted").release().await.expect("release");
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("task");
    }
    setup.nothing_left_of_the_waiters("doc").await;
    assert!(setup.members(&setup.key("doc", "rw", "")).await.is_empty());
    assert!(
        setup
            .members(&setup.key("doc", "rw", "#writers-waiting"))
            .await
            .is_empty()
    );
}

/// A release's script is sent as text (a cleanup must be one command), so
/// its bytes are on every release's path: a permit, which is never
/// admitted, sends the script without the admitting step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permits_release_sends_no_admitting_step() {
    let setup = Setup::new().await;
    let received = || async {
        setup
            .info("stats", "total_net_input_bytes:")
            .await
            .expect("total_net_input_bytes")
    };
    // Other traffic (a subscription still being made, a renewal) only
    // adds bytes, so the least of a few rounds is each release's own.
    let (mut permits, mut reads) = (u64::MAX, u64::MAX);
    for _ in 0..3 {
        let permit = setup
            .near
            .semaphore("jobs", 2)
            .acquire()
            .await
            .expect("permit");
        let read = setup.near.rwlock("doc").read().await.expect("read");
        let before = received().await;
        permit.release().await.expect("release");
        let between = received().await;
        read.release().await.expect("release");
        let after = received().await;
        permits = permits.min(between - before);
        reads = reads.min(after - between);
    }
    // The admitting step is two thirds of the admitting script's text.
    assert!(
        permits * 2 < reads,
        "a permit's release took {permits} bytes, a read's {reads}"
    );
}
