//! What every TLS backend must do with a TLS setting that cannot work: a
//! clear error that names the backend and the cause, within the connect
//! timeout (never a hang), and no password in it. Run against a TLS-only
//! server that requires client certificates of [`TestCa::shared`].

use std::time::Duration;

use tokio::time::Instant;

use crate::servers::tls::TestCa;

/// Each way to get TLS wrong, with the TLS query options that show it.
fn mistakes() -> Vec<(&'static str, String)> {
    let (ca, stranger) = (TestCa::shared(), TestCa::stranger());
    let client = ca.client("distlock");
    vec![
        ("plaintext to a TLS-only server", String::new()),
        (
            "a CA that did not sign the server's certificate",
            stranger.url_options("distlock"),
        ),
        (
            "a client certificate the server's CA did not sign",
            format!(
                "tls_ca={}&tls_cert={}&tls_key={}",
                ca.ca.display(),
                stranger.client("distlock").cert.display(),
                stranger.client("distlock").key.display()
            ),
        ),
        (
            "no client certificate where one is required",
            format!("tls_ca={}", ca.ca.display()),
        ),
        (
            "a CA file that does not exist",
            format!(
                "tls_ca=/nonexistent/distlock-ca.pem&tls_cert={}&tls_key={}",
                client.cert.display(),
                client.key.display()
            ),
        ),
        (
            "a key file in place of the certificate",
            format!(
                "tls_ca={}&tls_cert={}&tls_key={}",
                ca.ca.display(),
                client.key.display(),
                client.key.display()
            ),
        ),
    ]
}

/// Connects and takes one lock with each mistake in turn: `url` makes the
/// backend's URL from TLS query options (it adds the rest, `connect_timeout`
/// and any password included). Each must fail within `bound` (the connect
/// timeout, with room for a loaded machine) naming `backend`, and not show
/// `password`.
pub async fn refused_clearly(
    backend: &str,
    url: impl Fn(&str) -> String,
    bound: Duration,
    password: Option<&str>,
) {
    for (mistake, options) in mistakes() {
        let url = url(&options);
        let started = Instant::now();
        let outcome = async {
            let backend = distlock::connect_backend(&url).await?;
            let locker = lock_core::Locker::from_arc(backend);
            locker
                .lock_with(
                    "tls",
                    lock_core::AcquireOptions::default().wait(lock_core::Wait::No),
                )
                .await
        };
        let outcome = tokio::time::timeout(bound * 4, outcome).await;
        let took = started.elapsed();
        let error = match outcome {
            Err(_) => panic!("{mistake}: no answer within {:?}", bound * 4),
            Ok(Ok(_)) => panic!("{mistake}: a lock was granted"),
            Ok(Err(e)) => e.to_string(),
        };
        eprintln!("{mistake}: {took:?}: {error}");
        assert!(
            took < bound,
            "{mistake}: took {took:?}, the bound is {bound:?}: {error}"
        );
        assert!(
            error.to_lowercase().contains(&backend.to_lowercase()),
            "{mistake}: the error does not name {backend}: {error}"
        );
        if let Some(password) = password {
            assert!(
                !error.contains(password),
                "{mistake}: the password is shown: {error}"
            );
        }
    }
}
