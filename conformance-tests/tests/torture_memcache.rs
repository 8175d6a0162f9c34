//! The fault suite on memcached: every row of lock-memcache's `Under
//! faults` table, run and held to its claim, on a dedicated server (the
//! suite kills and pauses it) with a fresh key prefix per row.

use std::time::Duration;

use conformance_tests::proxy::Proxy;
use conformance_tests::servers::memcached::Memcached;
use conformance_tests::targets::fresh_table;
use conformance_tests::torture::{
    Route, assert_faults_applied, hold_to_claim, rows, shared_nemesis,
};
use distlock::backends::memcache::MIN_TTL;

const README: &str = include_str!("../../lock-memcache/README.md");
const WORKER: &str = env!("CARGO_BIN_EXE_torture-worker");

/// memcache's shortest TTL (`Capabilities::min_ttl`): expiry is counted in
/// whole seconds on a clock that can lag by two, and the lease is taken two
/// seconds short.
const TTL: Duration = MIN_TTL;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcache_keeps_its_claims_under_faults() {
    let server = Memcached::start().await;
    let proxy = Proxy::start(server.port()).await;
    for row in rows(README, "Under faults") {
        let query = format!("prefix={}:", fresh_table());
        let direct = server.url(&query);
        let proxied = server.url_via(proxy.port(), &query);
        // memcached keeps nothing: a killed one comes back empty.
        let (mut nemesis, route) =
            shared_nemesis(&row.fault, server.process(), std::slice::from_ref(&proxy))
                .unwrap_or_else(|| panic!("no nemesis for the README's fault {:?}", row.fault));
        let url = match route {
            Route::Direct => &direct,
            Route::Proxied => &proxied,
        };
        hold_to_claim(WORKER, "memcache", url, TTL, &row, nemesis.as_mut()).await;
        assert_faults_applied("memcache", &row, std::slice::from_ref(&proxy));
    }
}
