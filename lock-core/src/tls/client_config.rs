//! The rustls client configuration of a backend's TLS material, for
//! drivers that take one (or that cannot trust the public roots and the
//! operating system's store together on their own).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::TlsMaterial;
use crate::error::Result;

/// The name a server's certificate must carry, from its `host:port`
/// (`[::1]:port` for IPv6): a DNS name, or an IP address.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| format!("{host}: {e}"))
}

/// Makes rustls's `ring` provider the process default unless one is set:
/// drivers that build their configuration with `ClientConfig::builder()`
/// need a default, and find none when more than one provider is compiled
/// in (zookeeper-client brings `aws-lc-rs`).
pub(super) fn install_default_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one in between: theirs stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

impl TlsMaterial {
    /// The rustls configuration: the CA file's certificates, or the public
    /// (webpki) roots and the operating system's trust store; and the
    /// client certificate, if any. Uses the `ring` provider whatever the
    /// process default is, so no provider needs to be installed first.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| self.refused(e))?
            .with_root_certificates(self.root_store()?);
        let config = match self.identity_pem() {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| self.refused(format!("option \"tls_cert\": {e}")))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| self.refused(format!("option \"tls_key\": {e}")))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    self.refused(format!("the client certificate and key do not match: {e}"))
                })?
            }
        };
        Ok(Arc::new(config))
    }

    /// The certificates servers are checked against: the CA file's, or the
    /// public roots and the operating system's.
    pub fn root_store(&self) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        match self.ca_pem() {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| self.refused(format!("option \"tls_ca\": {e}")))?;
                    roots
                        .add(cert)
                        .map_err(|e| self.refused(format!("option \"tls_ca\": {e}")))?;
                }
            }
            None => {
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                let system = rustls_native_certs::load_native_certs();
                for e in &system.errors {
                    tracing::debug!(error = %e, "a certificate of the system trust store was skipped");
                }
                roots.add_parsable_certificates(system.certs);
            }
        }
        Ok(roots)
    }
}
