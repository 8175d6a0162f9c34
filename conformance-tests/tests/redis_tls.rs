//! Redis and Redlock over TLS (TLS-only servers, client certificates
//! required): TLS settings that cannot work are refused clearly and in
//! time, and the password is never in the error.

use std::time::Duration;

use conformance_tests::servers::redis::{Redis, RedisSet};
use conformance_tests::tls_refusals::refused_clearly;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

/// `url` without its query, as `redis://`: TLS comes only from the options
/// each mistake adds (none, for plain text).
fn plain(url: &str) -> String {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    base.replacen("rediss://", "redis://", 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly() {
    let server = Redis::shared_tls().await;
    let base = plain(&server.url(""));
    let url = |tls: &str| {
        format!(
            "{base}?connect_timeout={}ms&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    refused_clearly("redis", url, 2 * CONNECT_TIMEOUT, Some(server.password())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly_by_redlock() {
    let set = RedisSet::shared_tls().await;
    let base = set.url("");
    let base = base.split_once('?').map_or(base.as_str(), |(b, _)| b);
    let url = |tls: &str| {
        format!(
            "{base}?connect_timeout={}ms&timeout=200ms&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    let password = set.nodes[0].password();
    refused_clearly("redlock", url, 2 * CONNECT_TIMEOUT, Some(password)).await;
}
