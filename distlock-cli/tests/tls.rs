//! `distlock run` against a TLS-only etcd (`--client-cert-auth`), reached
//! through the URL's TLS options: a private CA and a client certificate,
//! or `tls=true` with the CA in the system's trust store.

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use conformance_tests::servers::etcd::Etcd;
use conformance_tests::servers::tls::TestCa;
use conformance_tests::targets::fresh_table;

/// Runs `distlock` with `args` in a temporary directory, with `env` set.
async fn run(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        distlock(dir.path()).args(args).envs(env).output().unwrap()
    })
    .await
    .unwrap()
}

/// `run --url URL --name NAME -- sh -c 'echo $DISTLOCK_TOKEN'`.
fn echo_token(url: &str, name: &str) -> Vec<String> {
    ["run", "--url", url, "--name", name, "--"]
        .into_iter()
        .chain(["sh", "-c", "echo $DISTLOCK_TOKEN"])
        .map(str::to_owned)
        .collect()
}

fn token(out: &Output) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("a token, got {text:?}: {}", stderr(out)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_takes_a_lock_on_a_tls_only_etcd() {
    let etcd = Etcd::shared_tls().await;
    let url = etcd.url(&fresh_table(), "");
    assert!(
        url.contains("tls_ca=") && url.contains("tls_cert="),
        "{url}"
    );
    let first = run(echo_token(&url, "tls-job"), vec![]).await;
    assert!(first.status.success(), "{}", stderr(&first));
    let second = run(echo_token(&url, "tls-job"), vec![]).await;
    assert!(second.status.success(), "{}", stderr(&second));
    // Fencing tokens are create revisions of the lock's key in etcd.
    assert!(token(&second) > token(&first));
}

/// `distlock run` on `url` (with `tls=true`) gets in when the system's
/// store is the test CA (`SSL_CERT_FILE`), and is refused by name when it
/// is a stranger's (and `SSL_CERT_DIR` an empty directory).
async fn the_system_store_decides(url: &str) {
    let trusted = run(
        echo_token(url, "tls-job"),
        vec![("SSL_CERT_FILE", TestCa::shared().ca.display().to_string())],
    )
    .await;
    assert!(trusted.status.success(), "{}", stderr(&trusted));
    let store = tempfile::tempdir().unwrap();
    let untrusted = run(
        echo_token(url, "tls-job"),
        vec![
            ("SSL_CERT_FILE", TestCa::stranger().ca.display().to_string()),
            ("SSL_CERT_DIR", store.path().display().to_string()),
        ],
    )
    .await;
    assert!(!untrusted.status.success());
    assert!(
        stderr(&untrusted).contains("UnknownIssuer"),
        "{}",
        stderr(&untrusted)
    );
}

/// `tls=true` trusts the system's store: here `SSL_CERT_FILE`, which holds
/// the test CA, as an administrator's CA bundle would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_tls_true_trusts_the_system_store() {
    let etcd = Etcd::shared_tls().await;
    let pki = TestCa::shared();
    let client = pki.client("distlock");
    let url = format!(
        "etcd://{}/{}?tls=true&tls_cert={}&tls_key={}",
        etcd.endpoints(),
        fresh_table(),
        client.cert.display(),
        client.key.display()
    );
    the_system_store_decides(&url).await;
}

/// The same on PostgreSQL and MariaDB, whose driver (sqlx) reads no trust
/// store of its own: `tls=true` hands it the system's beside its public
/// roots. `server` is the TLS-only server.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn sql_tls_true_trusts_the_system_store(server: &conformance_tests::servers::SqlInstance) {
    use conformance_tests::servers::SqlServer as _;
    let ca = format!("tls_ca={}&", TestCa::shared().ca.display());
    let url = server
        .url(&format!("table={}", fresh_table()))
        .replace(&ca, "tls=true&");
    assert!(url.contains("tls=true&tls_cert="), "{url}");
    the_system_store_decides(&url).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_tls_true_on_postgres_trusts_the_system_store() {
    let server = conformance_tests::servers::postgres::Postgres::shared_tls().await;
    sql_tls_true_trusts_the_system_store(server).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_tls_true_on_mariadb_trusts_the_system_store() {
    let server = conformance_tests::servers::mariadb::Mariadb::shared_tls().await;
    sql_tls_true_trusts_the_system_store(server).await;
}

/// A URL without TLS options to the TLS-only member: a clear error, in
/// time, that says to add them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_tls_says_the_server_takes_tls_only() {
    let etcd = Etcd::shared_tls().await;
    let url = format!(
        "etcd://{}/{}?connect_timeout=2s",
        etcd.endpoints(),
        fresh_table()
    );
    let started = Instant::now();
    let out = run(echo_token(&url, "tls-job"), vec![]).await;
    let took = started.elapsed();
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(
        text.contains("etcd") && text.contains("takes TLS only") && text.contains("tls=true"),
        "{text}"
    );
    assert!(took < Duration::from_secs(4), "took {took:?}: {text}");
}
