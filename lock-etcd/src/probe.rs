//! Why a first contact failed, when TLS is to blame. tonic reports a TLS
//! alert from the server (a client certificate refused, or none given) and
//! a TLS-only server that closes a plain connection alike, as a closed
//! connection; this opens one connection of its own to each member, speaks
//! TLS to it as the client would, and names the cause.

use std::sync::Arc;
use std::time::Duration;

use lock_core::Error;
use lock_core::tls::{TlsMaterial, TlsOptions};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

use crate::EtcdConfig;

/// How long a member that took our handshake has to refuse the client
/// certificate (TLS 1.3 servers refuse it after the handshake, with an
/// alert that comes before anything else they send).
const ALERT_WAIT: Duration = Duration::from_millis(500);

/// The error to report for `failed`, the first request of a client made
/// with `config` since `started`: a clear one if a member's TLS shows the
/// cause within `config.connect_timeout` of `started`; else `failed`.
pub(crate) async fn explain(config: &EtcdConfig, started: Instant, failed: Error) -> Error {
    if !matches!(failed, Error::Unavailable { .. }) {
        return failed;
    }
    let deadline = started + config.connect_timeout;
    let material = match config.tls.load(crate::NAME) {
        Ok(material) => material,
        Err(e) => return e,
    };
    for endpoint in config.endpoint_urls() {
        let addr = endpoint
            .split_once("://")
            .map_or(endpoint.as_str(), |(_, a)| a);
        let found = timeout_at(deadline, probe(addr, material.as_ref())).await;
        if let Ok(Some(cause)) = found {
            return cause;
        }
    }
    failed
}

/// The TLS trouble with the member at `addr`, if any shows.
async fn probe(addr: &str, material: Option<&TlsMaterial>) -> Option<Error> {
    match material {
        Some(material) => refused(addr, material).await,
        None => takes_tls_only(addr).await.then(|| Error::invalid_config(crate::NAME, format!(
                "{addr} takes TLS only (a plain connection was closed, a TLS handshake answered): \
                 add tls=true for a certificate of a public or system-trusted CA, or \
                 tls_ca=PATH for a private CA (and tls_cert, tls_key if the cluster \
                 requires client certificates)"
            ))),
    }
}

/// Our TLS to `addr` as the client speaks it: an error if the handshake
/// fails or the server sends an alert after it.
async fn refused(addr: &str, material: &TlsMaterial) -> Option<Error> {
    let config = material.client_config().ok()?;
    let refusal = |what: &str, e: std::io::Error| {
        let hint = if material.identity_pem().is_some() {
            "the cluster's --trusted-ca-file must hold the CA that signed tls_cert"
        } else {
            "the cluster requires a client certificate: add tls_cert and tls_key"
        };
        Error::invalid_config(
            crate::NAME,
            format!("TLS with {addr}: {what}: {e} ({hint})"),
        )
    };
    match handshake(addr, config).await? {
        // A plain-text port closes at our ClientHello (with a reset when
        // it had not read all of it), or answers it with something that is
        // no TLS record.
        Err(e) if plain_text_answer(&e) => Some(Error::invalid_config(
            crate::NAME,
            format!(
                "{addr} does not answer TLS ({e}): is it a plain-text client port? \
                     Drop tls, tls_ca, tls_cert and tls_key, or use the cluster's https port"
            ),
        )),
        Err(e) if tls_error(&e).is_some() => Some(Error::invalid_config(
            crate::NAME,
            format!(
                "TLS with {addr}: {e} (tls_ca, or the public and system roots without it, \
                 must hold the CA that signed the server's certificate, for the address \
                 in the URL)"
            ),
        )),
        Err(_) => None,
        Ok(mut stream) => {
            let mut byte = [0u8; 1];
            match timeout(ALERT_WAIT, stream.read(&mut byte)).await {
                Ok(Err(e)) if tls_error(&e).is_some() => Some(refusal("the server refused us", e)),
                _ => None,
            }
        }
    }
}

/// Whether a failed handshake is a plain-text server's doing: the
/// connection closed or reset at our ClientHello, or an answer that is no
/// TLS record.
fn plain_text_answer(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | ConnectionAborted
    ) || matches!(tls_error(e), Some(rustls::Error::InvalidMessage(_)))
}

/// Whether `addr` answers a TLS handshake (whatever its certificate).
async fn takes_tls_only(addr: &str) -> bool {
    let Ok(Some(material)) = TlsOptions::on().load(crate::NAME) else {
        return false;
    };
    let Ok(config) = material.client_config() else {
        return false;
    };
    match handshake(addr, config).await {
        Some(Ok(_)) => true,
        // A certificate we do not trust, or an alert: it speaks TLS. Bytes
        // that are no TLS record (a plain server's answer) are no sign.
        Some(Err(e)) => {
            tls_error(&e).is_some_and(|e| !matches!(e, rustls::Error::InvalidMessage(_)))
        }
        None => false,
    }
}

/// The TLS error behind an I/O error of tokio-rustls, if it is one.
fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref()
}

/// A TLS handshake with `addr` offering HTTP/2, as gRPC does; `None` if
/// no TCP connection could be made.
async fn handshake(
    addr: &str,
    config: Arc<tokio_rustls::rustls::ClientConfig>,
) -> Option<std::io::Result<tokio_rustls::client::TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await.ok()?;
    let name = lock_core::tls::server_name(addr).ok()?;
    let mut config = Arc::unwrap_or_clone(config);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Some(
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await,
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;

    /// A plain-text server that closes after one read: of all the client
    /// sent (an orderly close, seen as end of file) or of a few bytes (the
    /// kernel then resets the connection, as it does for etcd's plain port
    /// when the close comes before the whole ClientHello was read).
    async fn plain_server(read_all: bool) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0u8; if read_all { 64 * 1024 } else { 8 }];
            let _ = conn.read(&mut buffer).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_plain_port_that_closes_or_resets_is_named() {
        let material = TlsOptions::on().load(crate::NAME).unwrap().unwrap();
        for read_all in [true, false] {
            let addr = plain_server(read_all).await;
            let error = refused(&addr, &material)
                .await
                .unwrap_or_else(|| panic!("no cause found (read all: {read_all})"));
            assert!(
                error.to_string().contains("does not answer TLS"),
                "read all: {read_all}: {error}"
            );
        }
    }
}
