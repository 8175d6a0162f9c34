//! TLS for redis-rs. Its own features trust the public roots or the
//! system's store, never both, and no private CA: so the roots `tls=true`
//! means (or the `tls_ca` file) are handed to it as PEM, with the client
//! certificate, through `TlsCertificates`.

use lock_core::tls::TlsOptions;
use lock_core::{Error, Result};
use redis::{ClientTlsConfig, TlsCertificates};

/// The certificates redis-rs connects with, `None` when TLS is off; the
/// files are read now, so a missing one is an error naming its option.
pub(crate) fn certificates(tls: &TlsOptions) -> Result<Option<TlsCertificates>> {
    let Some(material) = tls.load(crate::NAME)? else {
        return Ok(None);
    };
    Ok(Some(TlsCertificates {
        client_tls: material.identity_pem().map(|(cert, key)| ClientTlsConfig {
            client_cert: cert.to_vec(),
            client_key: key.to_vec(),
        }),
        root_cert: Some(material.roots_pem()),
    }))
}

/// `e`, from a connect with TLS on or off (`tls`), with a hint at the
/// likely cause when it is a TLS mismatch: redis-rs gives only the bare
/// I/O or rustls error.
pub(crate) fn explained(e: Error, tls: bool) -> Error {
    let Error::Unavailable {
        backend,
        message,
        source,
        ..
    } = e
    else {
        return e;
    };
    let hint = if !tls {
        let reset = ["reset by peer", "closed", "broken pipe", "end of file"];
        reset
            .iter()
            .any(|r| message.to_lowercase().contains(r))
            .then_some(
                "the server closed the connection: if it takes TLS only, use rediss:// or tls=true",
            )
    } else if message.contains("invalid peer certificate") {
        Some("the server's TLS certificate is not signed by a CA this client trusts: see tls_ca")
    } else if message.contains("received fatal alert") {
        Some(
            "the server refused the TLS handshake: it may need a client certificate it trusts, see tls_cert and tls_key",
        )
    } else if message.contains("corrupt message") || message.contains("InvalidContentType") {
        Some("the server does not answer in TLS: drop rediss:// or tls=true")
    } else {
        None
    };
    let message = match hint {
        Some(hint) => format!("{message} ({hint})"),
        None => message,
    };
    let explained = Error::unavailable(backend, message);
    match source {
        Some(source) => explained.with_source(source),
        None => explained,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable(message: &str) -> Error {
        Error::unavailable(crate::NAME, message.to_owned())
    }

    #[test]
    fn connect_failures_from_a_tls_mismatch_say_what_to_change() {
        for (message, tls, hint) in [
            (
                "Connection reset by peer (os error 104)",
                false,
                "rediss://",
            ),
            ("invalid peer certificate: UnknownIssuer", true, "tls_ca"),
            (
                "received fatal alert: CertificateRequired",
                true,
                "tls_cert",
            ),
            ("Connection refused (os error 111)", false, ""),
        ] {
            let e = explained(unavailable(message), tls).to_string();
            assert!(e.contains(message) && e.contains(hint), "{e}");
            if hint.is_empty() {
                assert!(
                    e.ends_with(message),
                    "no hint for an unrelated failure: {e}"
                );
            }
        }
    }
}
