//! Servers the contributor runs instead of the ones the harness starts: one
//! `DISTLOCK_TEST_<BACKEND>_URL` variable per backend, and one each for a
//! Redis Cluster and Redis Sentinel (docker-compose.yml starts a server for
//! each but those two; the README lists the values).
//!
//! When a backend's variable is set, `shared()` of that backend's server
//! type (the server every test of a test binary shares) is the server the
//! variable names, and the harness starts none for those tests. Tests that
//! stop, freeze, restart or reconfigure a server, or need a cluster of
//! several, call `start()` and still get a server of their own: they cannot
//! do that to somebody else's. Tests stay apart on one server as they do on
//! the harness's: each makes its own table, key prefix or chroot
//! ([`crate::targets::fresh_table`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

use super::url::ServerUrl;

use super::backends::{BACKENDS, Backend};

/// The URL `backend`'s variable holds, checked; `None` when it is unset or
/// empty. A malformed value fails the test with a message naming the
/// variable, and so does a `DISTLOCK_TEST_…_URL` variable no backend has
/// (a typo would otherwise leave the harness starting servers unasked).
pub fn configured(backend: &Backend) -> Option<ServerUrl> {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("DISTLOCK_TEST_")
            && name.ends_with("_URL")
            && !BACKENDS.iter().any(|b| b.variable == name)
        {
            let known: Vec<&str> = BACKENDS.iter().map(|b| b.variable).collect();
            panic!(
                "{name} is set, but no backend reads it; the variables are {}",
                known.join(", ")
            );
        }
    }
    let text = match std::env::var(backend.variable) {
        Ok(text) => text,
        Err(std::env::VarError::NotPresent) => return None,
        Err(std::env::VarError::NotUnicode(_)) => {
            panic!("{} is not valid UTF-8", backend.variable)
        }
    };
    if text.trim().is_empty() {
        return None;
    }
    let url = ServerUrl::parse(backend, &text).unwrap_or_else(|why| {
        panic!(
            "{} is not a URL the {} tests can use: {why}. Expected e.g. {}",
            backend.variable, backend.label, backend.example
        )
    });
    Some(url)
}

/// The server `backend`'s variable names, once it accepts a connection
/// (for `ready_query`, the query options the check connects with); `None`
/// when the variable is unset. Says on stderr, once per test binary, which
/// server the tests use. A server that cannot be used fails the test with
/// a message naming the variable, at once for every later test too.
pub async fn external(backend: &Backend, ready_query: &str) -> Option<ServerUrl> {
    static REACHED: Mutex<BTreeMap<&str, Result<(), String>>> = Mutex::const_new(BTreeMap::new());
    let url = configured(backend)?;
    let mut reached = REACHED.lock().await;
    if !reached.contains_key(backend.variable) {
        let outcome = reach(backend, &url, ready_query).await;
        if outcome.is_ok() {
            // Straight to stderr, past the test harness's output capture.
            let line = format!(
                "distlock tests: the shared {} server is {} (from {}); none started\n",
                backend.label,
                url.redacted(),
                backend.variable
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        reached.insert(backend.variable, outcome);
    }
    if let Some(Err(why)) = reached.get(backend.variable) {
        panic!("{why}");
    }
    Some(url)
}

/// Connects once, retrying for a while if the server is still starting.
async fn reach(backend: &Backend, url: &ServerUrl, ready_query: &str) -> Result<(), String> {
    let target = url.url(ready_query);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match distlock::connect_backend(&target).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                return Err(format!(
                    "{} names {}, which the {} tests cannot use: {e}",
                    backend.variable,
                    url.redacted(),
                    backend.label
                ));
            }
        }
    }
}
