//! Real servers for the backend tests, started from the distribution's
//! packages on free loopback ports, with their data in temporary
//! directories, or run by the contributor and named by a
//! `DISTLOCK_TEST_*_URL` variable ([`external`]).
//!
//! Each server runs under a small shell watchdog whose standard input is a
//! pipe from the test process. The watchdog starts and stops the server on
//! request and, when the pipe closes — the test process ended, however it
//! ended — stops the server and deletes its directory. No server outlives
//! the tests that started it.

pub mod backends;
#[cfg(feature = "zk")]
pub mod curator;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
pub mod etcd_auth;
pub mod external;
#[cfg(feature = "mysql")]
pub mod mariadb;
#[cfg(feature = "memcache")]
pub mod memcached;
pub mod ports;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod process;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redis_cluster;
#[cfg(feature = "redis")]
pub mod redis_sentinel;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql_teams;
pub mod tls;
pub mod url;
#[cfg(feature = "zk")]
pub mod zookeeper;

use std::net::SocketAddr;
use std::time::Duration;

use lock_core::backend::async_trait;

pub use self::process::{Supervised, as_user_args, data_dir, find_binary, run_as};
use self::url::ServerUrl;

/// A SQL server the fault tests can reach, stop and restart.
#[async_trait]
pub trait SqlServer: Send + Sync {
    /// The backend's name, for messages.
    fn label(&self) -> &'static str;
    /// A URL with this query string (no leading `?`).
    fn url(&self, query: &str) -> String;
    /// The same URL, through another port (a proxy's).
    fn url_via(&self, port: u16, query: &str) -> String;
    /// The port the server listens on.
    fn port(&self) -> u16;
    /// Its address, for a proxy in front of it.
    fn socket_addr(&self) -> SocketAddr;
    /// The password in every URL.
    fn password(&self) -> &str;
    /// The server process.
    fn process(&self) -> &Supervised;
    /// Waits until the server accepts connections.
    async fn wait_ready(&self);
}

/// The query a readiness check connects with: a table of its own, and no
/// long wait for a server that is still starting.
const SQL_READY: &str = "table=distlock_ready&connect_timeout=1s";

/// A SQL server: where it is, and its process if the harness started it.
#[derive(Debug)]
pub struct SqlInstance {
    label: &'static str,
    url: ServerUrl,
    process: Option<Supervised>,
}

impl SqlInstance {
    /// A URL with this query string, logged in as `user` with `password`
    /// instead of the harness's own user.
    pub fn url_as(&self, user: &str, password: &str, query: &str) -> String {
        self.url.as_user(user, password).url(query)
    }

    /// Waits until a server just started accepts connections;
    /// [`PortTaken`](ports::PortTaken) if it could not listen.
    async fn wait_started(&self) -> Result<(), ports::PortTaken> {
        let url = self.url(SQL_READY);
        ports::wait_started(
            self.label,
            Duration::from_secs(60),
            &[(self.process(), vec![self.port()])],
            || async { distlock::connect_backend(&url).await.is_ok() },
        )
        .await
    }

    /// The shared server: the one `backend`'s variable names, or else one
    /// that `start` starts.
    async fn shared<F: Future<Output = Self>>(
        label: &'static str,
        backend: &backends::Backend,
        start: impl FnOnce() -> F,
    ) -> Self {
        match external::external(backend, SQL_READY).await {
            Some(url) => Self {
                label,
                url,
                process: None,
            },
            None => start().await,
        }
    }
}

#[async_trait]
impl SqlServer for SqlInstance {
    fn label(&self) -> &'static str {
        self.label
    }

    fn url(&self, query: &str) -> String {
        self.url.url(query)
    }

    fn url_via(&self, port: u16, query: &str) -> String {
        self.url.url_via(port, query)
    }

    fn port(&self) -> u16 {
        self.url.port()
    }

    fn socket_addr(&self) -> SocketAddr {
        self.url.socket_addr()
    }

    fn password(&self) -> &str {
        self.url
            .password()
            .expect("the harness's servers and the variables' all have one")
    }

    fn process(&self) -> &Supervised {
        started(&self.process, &self.url.redacted())
    }

    async fn wait_ready(&self) {
        let url = self.url(SQL_READY);
        wait_until_ready(
            self.label,
            Duration::from_secs(60),
            || log_of(&self.process),
            || async { distlock::connect_backend(&url).await.is_ok() },
        )
        .await;
    }
}

/// The process of a server the harness started. One named by a
/// `DISTLOCK_TEST_*` variable has none: a test that stops, freezes or
/// restarts its server starts its own.
fn started<'a>(process: &'a Option<Supervised>, server: &str) -> &'a Supervised {
    process.as_ref().unwrap_or_else(|| {
        panic!(
            "{server} comes from a DISTLOCK_TEST_* variable, not from the harness: a test \
             that stops, freezes or restarts its server must start its own (start())"
        )
    })
}

/// The server's log, if the harness started it.
fn log_of(process: &Option<Supervised>) -> String {
    process.as_ref().map(Supervised::log).unwrap_or_default()
}

/// Polls `ready` until it returns true or `limit` passes.
pub async fn wait_until_ready<F, Fut>(
    what: &str,
    limit: Duration,
    log: impl Fn() -> String,
    mut ready: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_for(&format!("{what} to become ready"), limit, log, || {
        let ready = ready();
        async move { ready.await.then_some(()) }
    })
    .await;
}

/// Polls `check` every 100 ms until it gives a value, failing the test
/// with `log` after `limit`.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    limit: Duration,
    log: impl Fn() -> String,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what} after {limit:?}; the log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
