//! The `etcd_client::Client` an [`EtcdConfig`] describes: its members,
//! credentials, timeouts and TLS.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, Identity, TlsOptions};
use lock_core::tls::TlsMaterial;
use lock_core::{Error, Result};

use crate::config::EtcdConfig;
use crate::error::convert;

/// Connects a client as [`EtcdBackend::connect_with`](crate::EtcdBackend::connect_with)
/// does, for tools that speak to the same cluster beside the backend (the
/// CLI's `bench` floor). The client connects lazily: an unreachable cluster
/// or a refused handshake shows at its first request. A TLS file that is
/// missing, unreadable or not what its option needs is an
/// [`Error::InvalidConfig`] naming etcd, the option and the path.
pub async fn connect(config: &EtcdConfig) -> Result<Client> {
    let mut options = ConnectOptions::new()
        .with_timeout(config.timeout)
        .with_connect_timeout(config.connect_timeout)
        .with_keep_alive(Duration::from_secs(5), config.timeout);
    if let Some((user, password)) = &config.credentials {
        options = options.with_user(user.clone(), password.clone());
    }
    if let Some(material) = config.tls.load(crate::NAME)? {
        options = options.with_tls(tls_options(&material, config.connect_timeout)?);
    }
    let connect = Client::connect(config.endpoint_urls(), Some(options));
    tokio::time::timeout(config.connect_timeout, connect)
        .await
        .map_err(|_| Error::timeout("connecting to etcd", config.connect_timeout))?
        .map_err(|e| convert("connect", e))
}

/// tonic's TLS settings for `material`: the private CA's certificates, or
/// the public roots and the system's trust store (lock-core's root store,
/// so that a system without a trust store still has the public roots), and
/// the client certificate. The handshake must end within `handshake`.
fn tls_options(material: &TlsMaterial, handshake: Duration) -> Result<TlsOptions> {
    let roots = material.root_store()?;
    let mut tls = TlsOptions::new()
        .trust_anchors(roots.roots)
        .timeout(handshake);
    if let Some((cert, key)) = material.identity_pem() {
        // tonic would find a certificate that does not parse, or a key that
        // does not match it, only when it first connects, as a transport
        // error; rustls says which now.
        material.client_config()?;
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(tls)
}
