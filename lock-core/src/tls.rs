//! The one TLS vocabulary of every network backend: `tls=true` (the public
//! roots and the operating system's trust store), `tls_ca=PATH` (PEM CA
//! certificates to trust instead), `tls_cert=PATH` and `tls_key=PATH` (a
//! client certificate and its key, for mutual TLS).
//!
//! [`TlsOptions`] is what a URL or a config type says; [`TlsOptions::load`]
//! reads the files when the backend connects, so a missing or unreadable
//! file is an error naming the backend, the option and the path. With the
//! `rustls` feature, [`TlsMaterial::client_config`] builds the rustls
//! configuration for backends whose driver takes one.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::url::QueryOptions;

/// How a backend reaches its server over TLS, if at all.
///
/// ```
/// use lock_core::tls::TlsOptions;
///
/// let public = TlsOptions::on();
/// let private = TlsOptions::on()
///     .ca("/etc/distlock/ca.pem")
///     .client_cert("/etc/distlock/client.pem", "/etc/distlock/client.key");
/// assert!(public.is_enabled() && private.is_enabled());
/// assert!(!TlsOptions::default().is_enabled());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    enabled: bool,
    ca: Option<PathBuf>,
    identity: Option<(PathBuf, PathBuf)>,
}

impl TlsOptions {
    /// The URL options read by [`TlsOptions::from_query`].
    pub const URL_OPTIONS: [&'static str; 4] = ["tls", "tls_ca", "tls_cert", "tls_key"];

    /// TLS with the public roots and the operating system's trust store.
    pub fn on() -> Self {
        Self {
            enabled: true,
            ..Self::default()
        }
    }

    /// Trust only the CA certificates in the PEM file at `path` (one or
    /// more); turns TLS on.
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.enabled = true;
        self.ca = Some(path.into());
        self
    }

    /// Present the client certificate (PEM, its chain after it) and key
    /// (PEM, PKCS#8, PKCS#1 or SEC1) at these paths; turns TLS on.
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.enabled = true;
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// Whether connections use TLS.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The CA file trusted instead of the public and system roots.
    pub fn ca_path(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The client certificate and key files.
    pub fn client_cert_paths(&self) -> Option<(&Path, &Path)> {
        self.identity
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()))
    }

    /// Takes `tls`, `tls_ca`, `tls_cert` and `tls_key` from a URL's query.
    /// `implied` is true for schemes that always use TLS (`rediss://`),
    /// where `tls=false` is a contradiction. A CA or a client certificate
    /// turns TLS on.
    pub fn from_query(q: &mut QueryOptions, implied: bool) -> Result<Self> {
        let said = match q.take("tls") {
            None => None,
            Some(v) if v == "true" => Some(true),
            Some(v) if v == "false" => Some(false),
            Some(other) => {
                return Err(q.invalid(format!(
                    "option \"tls\" must be true or false, got \"{other}\""
                )));
            }
        };
        let mut path = |key: &str| match q.take(key) {
            Some(p) if p.is_empty() => Err(format!("option \"{key}\" needs a file path")),
            p => Ok(p.map(PathBuf::from)),
        };
        let paths = (path("tls_ca"), path("tls_cert"), path("tls_key"));
        let (ca, cert, key) = match paths {
            (Ok(ca), Ok(cert), Ok(key)) => (ca, cert, key),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Err(q.invalid(e)),
        };
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(q.invalid(
                    "options \"tls_cert\" and \"tls_key\" go together (a client certificate and its key)",
                ));
            }
        };
        let files = ca.is_some() || identity.is_some();
        let enabled = match said {
            Some(false) if implied => {
                return Err(q.invalid("this scheme always uses TLS; drop \"tls=false\""));
            }
            Some(false) if files => {
                return Err(q.invalid(
                    "\"tls_ca\", \"tls_cert\" and \"tls_key\" need TLS; drop \"tls=false\"",
                ));
            }
            Some(said) => said,
            None => implied || files,
        };
        Ok(Self {
            enabled,
            ca,
            identity,
        })
    }

    /// Reads the files, for `backend` (named in errors): `None` when TLS is
    /// off. The PEM is checked to hold what each option promises, so a
    /// wrong file is reported here rather than as a failed handshake.
    pub fn load(&self, backend: &'static str) -> Result<Option<TlsMaterial>> {
        if !self.enabled {
            return Ok(None);
        }
        #[cfg(feature = "rustls")]
        client_config::install_default_provider();
        let read = |option: &str, path: &Path, label: &[&str]| -> Result<Vec<u8>> {
            let invalid = |reason: String| Error::InvalidConfig {
                backend,
                reason: format!("option \"{option}\" ({}): {reason}", path.display()),
            };
            let pem = std::fs::read(path).map_err(|e| invalid(format!("cannot read it: {e}")))?;
            if !pem_has(&pem, label) {
                return Err(invalid(format!(
                    "no PEM \"{}\" block in it",
                    label.join("\" or \"")
                )));
            }
            Ok(pem)
        };
        let ca = self
            .ca
            .as_deref()
            .map(|p| read("tls_ca", p, &["CERTIFICATE"]))
            .transpose()?;
        let identity = match &self.identity {
            Some((cert, key)) => Some((
                read("tls_cert", cert, &["CERTIFICATE"])?,
                read(
                    "tls_key",
                    key,
                    &["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"],
                )?,
            )),
            None => None,
        };
        Ok(Some(TlsMaterial {
            backend,
            ca,
            identity,
        }))
    }
}

/// Where Linux distributions keep the system's CA bundle, as PEM.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The operating system's trust store as one PEM bundle (`SSL_CERT_FILE`
/// if set, else the distribution's bundle), for drivers that take roots as
/// PEM only; an error naming `backend` when there is none.
pub fn system_roots_pem(backend: &'static str) -> Result<Vec<u8>> {
    let given = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    let candidates = given
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(PathBuf::from));
    for path in candidates {
        if let Ok(pem) = std::fs::read(&path)
            && pem_has(&pem, &["CERTIFICATE"])
        {
            return Ok(pem);
        }
    }
    Err(Error::InvalidConfig {
        backend,
        reason: format!(
            "\"tls=true\" trusts the system's CA bundle, and none was found (SSL_CERT_FILE, {}); \
             give the CA with \"tls_ca\"",
            SYSTEM_BUNDLES.join(", ")
        ),
    })
}

/// Whether `pem` has a `-----BEGIN {label}-----` line for one of `labels`.
fn pem_has(pem: &[u8], labels: &[&str]) -> bool {
    let text = String::from_utf8_lossy(pem);
    text.lines().any(|line| {
        labels
            .iter()
            .any(|label| line.trim() == format!("-----BEGIN {label}-----"))
    })
}

mod material;
pub use material::TlsMaterial;

#[cfg(feature = "rustls")]
mod client_config;
#[cfg(feature = "rustls")]
#[cfg_attr(docsrs, doc(cfg(feature = "rustls")))]
pub use client_config::server_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_true_alone_loads_no_ca_and_no_certificate() {
        let material = TlsOptions::on().load("test").unwrap().unwrap();
        assert!(material.ca_pem().is_none() && material.identity_pem().is_none());
        assert!(TlsOptions::default().load("test").unwrap().is_none());
    }

    fn parse(url: &str, implied: bool) -> Result<TlsOptions> {
        let mut q = QueryOptions::parse(url)?;
        let tls = TlsOptions::from_query(&mut q, implied)?;
        q.finish(&TlsOptions::URL_OPTIONS)?;
        Ok(tls)
    }

    #[test]
    fn the_url_vocabulary() {
        assert_eq!(parse("x://h", false).unwrap(), TlsOptions::default());
        assert_eq!(parse("x://h", true).unwrap(), TlsOptions::on());
        assert_eq!(parse("x://h?tls=true", false).unwrap(), TlsOptions::on());
        assert_eq!(
            parse("x://h?tls_ca=/c.pem&tls_cert=/a.pem&tls_key=/a.key", false).unwrap(),
            TlsOptions::on()
                .ca("/c.pem")
                .client_cert("/a.pem", "/a.key")
        );
        for (url, implied, words) in [
            ("x://h?tls=yes", false, "true or false"),
            ("x://h?tls=false", true, "always uses TLS"),
            ("x://h?tls=false&tls_ca=/c.pem", false, "need TLS"),
            ("x://h?tls_cert=/a.pem", false, "go together"),
            ("x://h?tls_key=/a.key", false, "go together"),
            ("x://h?tls_ca=", false, "needs a file path"),
        ] {
            let e = parse(url, implied).unwrap_err().to_string();
            assert!(e.contains(words), "{url}: {e}");
        }
    }

    #[test]
    fn a_missing_or_wrong_file_names_the_backend_option_and_path() {
        let dir = std::env::temp_dir().join(format!("lock-core-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("ca.txt");
        std::fs::write(&not_pem, "hello").unwrap();
        let missing = TlsOptions::on().ca(dir.join("nowhere.pem"));
        let e = missing.load("etcd").unwrap_err().to_string();
        assert!(e.contains("etcd") && e.contains("tls_ca") && e.contains("nowhere.pem"));
        assert!(e.contains("cannot read"), "{e}");
        let e = TlsOptions::on().ca(&not_pem).load("zk").unwrap_err();
        assert!(e.is_invalid_input());
        assert!(e.to_string().contains("no PEM \"CERTIFICATE\""), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn material_debug_shows_no_pem() {
        let material = TlsMaterial {
            backend: "redis",
            ca: Some(b"-----BEGIN CERTIFICATE-----\nMIIB".to_vec()),
            identity: Some((
                b"cert".to_vec(),
                b"-----BEGIN PRIVATE KEY-----\nsecretkey".to_vec(),
            )),
        };
        let shown = format!("{material:?}");
        assert!(
            !shown.contains("MIIB") && !shown.contains("secretkey"),
            "{shown}"
        );
    }
}
