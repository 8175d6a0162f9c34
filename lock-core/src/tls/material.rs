//! What a backend's TLS files held, kept apart from how they are read
//! (`tls.rs`) and turned into a rustls configuration (`client_config.rs`),
//! which both use it.

use std::fmt;

use crate::error::Error;

/// The PEM contents of a backend's TLS files, read by `TlsOptions::load`.
/// `Debug` shows neither certificate nor key.
#[derive(Clone)]
pub struct TlsMaterial {
    pub(super) backend: &'static str,
    pub(super) ca: Option<Vec<u8>>,
    pub(super) identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsMaterial {
    /// The CA certificates to trust instead of the public and system roots.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca.as_deref()
    }

    /// The client certificate chain and its private key.
    pub fn identity_pem(&self) -> Option<(&[u8], &[u8])> {
        self.identity
            .as_ref()
            .map(|(c, k)| (c.as_slice(), k.as_slice()))
    }

    /// An error naming the backend, for a driver that refused this
    /// material.
    pub fn refused(&self, reason: impl fmt::Display) -> Error {
        Error::InvalidConfig {
            backend: self.backend,
            reason: format!("TLS: {reason}"),
        }
    }
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("backend", &self.backend)
            .field("ca", &self.ca.as_ref().map(|_| "<PEM>"))
            .field("identity", &self.identity.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}
