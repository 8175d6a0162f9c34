//! The rustls client configuration of a backend's TLS material, for
//! drivers that take one (or that cannot trust the public roots and the
//! operating system's store together on their own).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::material::TlsMaterial;
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

#[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
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
                roots.add_parsable_certificates(public_and_system_roots());
            }
        }
        Ok(roots)
    }

    /// The same roots as PEM text, for drivers that take trusted
    /// certificates only that way (redis-rs, whose own features give the
    /// public roots or the system's, not both): the CA file as it is, or
    /// the public roots and those of the system's that rustls can use.
    pub fn roots_pem(&self) -> Vec<u8> {
        if let Some(pem) = self.ca_pem() {
            return pem.to_vec();
        }
        let mut pem = String::new();
        for cert in public_and_system_roots() {
            // One unusable system certificate must not fail every
            // connection, as it would in a driver that parses them all.
            if RootCertStore::empty().add(cert.clone()).is_ok() {
                pem_block(&mut pem, &cert);
            }
        }
        pem.into_bytes()
    }
}

/// What `tls=true` trusts: the public (webpki) roots, then the operating
/// system's trust store.
fn public_and_system_roots() -> Vec<CertificateDer<'static>> {
    let mut roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS.to_vec();
    let system = rustls_native_certs::load_native_certs();
    for e in &system.errors {
        tracing::debug!(error = %e, "a certificate of the system trust store was skipped");
    }
    roots.extend(system.certs);
    roots
}

/// Appends `cert` to `pem` as a `CERTIFICATE` block.
fn pem_block(pem: &mut String, cert: &CertificateDer<'_>) {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
    pem.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_pem_holds_the_public_roots_and_the_system_store() {
        // What `tls=true` loads: no CA file, no client certificate.
        let material = TlsMaterial {
            backend: "test",
            ca: None,
            identity: None,
        };
        let pem = material.roots_pem();
        let parsed: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .unwrap();
        let public = webpki_root_certs::TLS_SERVER_ROOT_CERTS;
        assert!(
            public.iter().all(|c| parsed.contains(c)),
            "a public root is missing"
        );
        let system = rustls_native_certs::load_native_certs().certs;
        let usable = system
            .iter()
            .filter(|c| RootCertStore::empty().add((*c).clone()).is_ok());
        assert!(
            usable.clone().all(|c| parsed.contains(c)),
            "a system root is missing"
        );
        assert_eq!(
            material.root_store().unwrap().len(),
            parsed.len(),
            "the root store and the PEM trust the same roots"
        );
    }
}
