//! etcd over TLS (a TLS-only member, `--client-cert-auth`): TLS settings
//! that cannot work are refused clearly and in time, and TLS options
//! against a plain-text port too.

use std::time::Duration;

use conformance_tests::servers::etcd::Etcd;
use conformance_tests::servers::tls::TestCa;
use conformance_tests::tls_refusals::refused_clearly;
use distlock::backends::etcd::EtcdBackend;
use tokio::time::Instant;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_settings_are_refused_clearly() {
    let etcd = Etcd::shared_tls().await;
    let endpoints = etcd.endpoints();
    let url = |tls: &str| {
        format!(
            "etcd://{endpoints}/tls?connect_timeout={}ms&timeout=1s&{tls}",
            CONNECT_TIMEOUT.as_millis()
        )
    };
    refused_clearly("etcd", url, 2 * CONNECT_TIMEOUT, None).await;
}

/// TLS options against a plain-text client port: a clear error, in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_plain_port_is_refused_clearly() {
    let plain = Etcd::shared().await;
    let url = plain.url(
        "tls",
        &format!(
            "connect_timeout={}ms&timeout=1s&{}",
            CONNECT_TIMEOUT.as_millis(),
            TestCa::shared().url_options("distlock")
        ),
    );
    let started = Instant::now();
    let error = EtcdBackend::connect(&url).await.expect_err("refused");
    let took = started.elapsed();
    eprintln!("{took:?}: {error}");
    assert!(took < 2 * CONNECT_TIMEOUT, "took {took:?}: {error}");
    let text = error.to_string();
    assert!(
        text.contains("etcd") && text.contains("does not answer TLS"),
        "{text}"
    );
    assert!(!error.is_retryable(), "{error:?}");
}

/// `tls=true` trusts the public roots and the system's store, which do not
/// hold the test CA: the server's certificate is refused, by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_roots_refuse_a_private_ca_clearly() {
    let etcd = Etcd::shared_tls().await;
    let client = TestCa::shared().client("distlock");
    let url = format!(
        "etcd://{}/tls?connect_timeout={}ms&tls=true&tls_cert={}&tls_key={}",
        etcd.endpoints(),
        CONNECT_TIMEOUT.as_millis(),
        client.cert.display(),
        client.key.display()
    );
    let error = EtcdBackend::connect(&url).await.expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains("etcd") && text.contains("UnknownIssuer"),
        "{text}"
    );
}
