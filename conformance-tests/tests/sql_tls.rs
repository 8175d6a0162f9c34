//! PostgreSQL and MariaDB over TLS only (client certificates required):
//! TLS settings that cannot work are refused clearly and in time, with the
//! shared names and with sqlx's own; the password never shows. And
//! `password_file=`, which keeps the password out of the URL.

use std::time::Duration;

use conformance_tests::servers::SqlServer;
use conformance_tests::servers::mariadb::Mariadb;
use conformance_tests::servers::postgres::Postgres;
use conformance_tests::servers::tls::TestCa;
use conformance_tests::targets::fresh_table;
use conformance_tests::tls_refusals::refused_clearly;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

/// The server's URL without its TLS options, then `tls`.
fn url_with(server: &dyn SqlServer, tls: &str) -> String {
    let url = server.url(&format!(
        "table={}&connect_timeout={}ms&timeout=1s",
        fresh_table(),
        CONNECT_TIMEOUT.as_millis()
    ));
    // The harness's URL carries TLS options of its own: drop them.
    let (base, query) = url.split_once('?').expect("a query");
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with("tls"))
        .chain(tls.split('&').filter(|p| !p.is_empty()))
        .collect();
    format!("{base}?{}", kept.join("&"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_bad_tls_settings_clearly() {
    let server = Postgres::shared_tls().await;
    refused_clearly(
        "postgres",
        |tls| url_with(server, tls),
        2 * CONNECT_TIMEOUT,
        Some(server.password()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_refuses_bad_tls_settings_clearly() {
    let server = Mariadb::shared_tls().await;
    refused_clearly(
        "mysql",
        |tls| url_with(server, tls),
        2 * CONNECT_TIMEOUT,
        Some(server.password()),
    )
    .await;
}

/// sqlx's own names still work, and a contradiction with the shared ones is
/// refused before any I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drivers_own_names_still_work() {
    let ca = TestCa::shared();
    let client = ca.client("distlock");
    let (pg, maria) = (Postgres::shared_tls().await, Mariadb::shared_tls().await);
    for url in [
        url_with(
            pg,
            &format!(
                "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
                ca.ca.display(),
                client.cert.display(),
                client.key.display()
            ),
        ),
        url_with(
            maria,
            &format!(
                "ssl-mode=VERIFY_IDENTITY&ssl-ca={}&ssl-cert={}&ssl-key={}",
                ca.ca.display(),
                client.cert.display(),
                client.key.display()
            ),
        ),
    ] {
        let locker = distlock::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let guard = locker.try_lock("own-names").await.expect("free");
        guard.release().await.unwrap();
    }
    for server in [pg as &dyn SqlServer, maria] {
        let url = url_with(
            server,
            &format!(
                "{}&sslmode=disable&ssl-mode=DISABLED",
                ca.url_options("distlock")
            ),
        );
        let url = url.replace(
            if server.label().starts_with("postgres") {
                "&ssl-mode=DISABLED"
            } else {
                "&sslmode=disable"
            },
            "",
        );
        let err = distlock::connect(&url).await.unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains("not both"),
            "{err}"
        );
    }
}

/// `tls=false` against a TLS-only server: each server says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_is_refused_by_the_server_with_its_reason() {
    let pg = Postgres::shared_tls().await;
    let maria = Mariadb::shared_tls().await;
    for (server, reason) in [
        (pg as &dyn SqlServer, "no encryption"),
        // MariaDB checks the user's REQUIRE X509 first, and says only
        // "access denied": distlock adds what that may mean.
        (maria, "client certificate"),
    ] {
        let url = url_with(server, "tls=false");
        let started = std::time::Instant::now();
        let err = distlock::connect(&url).await.unwrap_err().to_string();
        assert!(started.elapsed() < 2 * CONNECT_TIMEOUT, "{err}");
        assert!(err.contains(reason), "{err}");
        assert!(!err.contains(server.password()), "{err}");
    }
}

/// `password_file=PATH`: the password read from a file at connect (its
/// trailing newline dropped); a wrong one refused, a missing file named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_can_come_from_a_file() {
    let (pg, maria) = (Postgres::shared_tls().await, Mariadb::shared_tls().await);
    let dir = tempfile::tempdir().unwrap();
    for server in [pg as &dyn SqlServer, maria] {
        let password = server.password();
        let (right, wrong) = (dir.path().join("right"), dir.path().join("wrong"));
        std::fs::write(&right, format!("{password}\n")).unwrap();
        std::fs::write(&wrong, "not-the-password\n").unwrap();
        let tls = TestCa::shared().url_options("distlock");
        let from = |file: &std::path::Path| {
            url_with(server, &format!("{tls}&password_file={}", file.display()))
                .replace(&format!(":{password}@"), "@")
        };
        assert!(!from(&right).contains(password));
        let locker = distlock::connect(&from(&right))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", server.label()));
        let guard = locker.try_lock("from-a-file").await.expect("free");
        guard.release().await.unwrap();
        let refused = distlock::connect(&from(&wrong)).await.unwrap_err();
        assert!(!refused.is_retryable(), "{refused}");
        let missing = distlock::connect(&from(&dir.path().join("missing")))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("password_file") && missing.contains("cannot read it"),
            "{missing}"
        );
        let both = url_with(server, &format!("{tls}&password_file={}", right.display()));
        let err = distlock::connect(&both).await.unwrap_err();
        assert!(
            err.is_invalid_input() && !err.to_string().contains(password),
            "{err}"
        );
    }
}
