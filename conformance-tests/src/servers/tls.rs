//! A test CA and its certificates, made once per test process at run time
//! (nothing checked in that could expire): the certificate every TLS
//! server presents, client certificates by name for mutual TLS, and a
//! second CA that no server trusts, for the tests of a wrong CA.
//!
//! The files are world-readable so that servers running as another user
//! (PostgreSQL, MariaDB) can read them; they protect nothing but tests.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS#8).
    pub key: PathBuf,
}

/// One certificate authority with the files of what it signed.
pub struct TestCa {
    dir: tempfile::TempDir,
    cert: Certificate,
    key: KeyPair,
    /// The CA certificate, for `tls_ca=` and the servers' trusted CA.
    pub ca: PathBuf,
    /// What servers present: valid for `localhost`, 127.0.0.1, 127.0.0.2
    /// and 127.0.0.3 (ensemble members), for server and client use (the
    /// members of a cluster connect to each other with it).
    pub server: CertFiles,
    clients: Mutex<BTreeMap<String, CertFiles>>,
}

impl TestCa {
    /// The CA every TLS server in this test process trusts.
    pub fn shared() -> &'static TestCa {
        static SHARED: OnceLock<TestCa> = OnceLock::new();
        SHARED.get_or_init(|| TestCa::new("distlock test CA"))
    }

    /// A CA no server trusts: its certificates are refused, and servers
    /// are not verified by it.
    pub fn stranger() -> &'static TestCa {
        static STRANGER: OnceLock<TestCa> = OnceLock::new();
        STRANGER.get_or_init(|| TestCa::new("a CA nobody trusts"))
    }

    fn new(name: &str) -> TestCa {
        let dir = tempfile::Builder::new()
            .prefix("distlock-pki-")
            .tempdir()
            .expect("a temporary directory for the test CA");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("make the CA's directory readable");
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("a self-signed CA");
        let ca = write(dir.path(), "ca.pem", &cert.pem());
        let mut made = TestCa {
            server: CertFiles {
                cert: PathBuf::new(),
                key: PathBuf::new(),
            },
            dir,
            cert,
            key,
            ca,
            clients: Mutex::default(),
        };
        made.server = made.sign(
            "server",
            &["localhost", "127.0.0.1", "127.0.0.2", "127.0.0.3"],
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        );
        made
    }

    /// A client certificate whose common name is `name` (the identity a
    /// server that maps certificates to users sees), made on first use.
    pub fn client(&self, name: &str) -> CertFiles {
        let mut clients = self.clients.lock().unwrap();
        clients
            .entry(name.to_owned())
            .or_insert_with(|| {
                self.sign(
                    &format!("client-{name}"),
                    &[],
                    &[ExtendedKeyUsagePurpose::ClientAuth],
                )
            })
            .clone()
    }

    /// The query options that make a backend trust this CA and present the
    /// client certificate `name` (no leading `&`).
    pub fn url_options(&self, name: &str) -> String {
        let client = self.client(name);
        format!(
            "tls_ca={}&tls_cert={}&tls_key={}",
            self.ca.display(),
            client.cert.display(),
            client.key.display()
        )
    }

    /// A certificate for `names` (DNS names or IP addresses), its common
    /// name the file stem `stem`.
    fn sign(&self, stem: &str, names: &[&str], usages: &[ExtendedKeyUsagePurpose]) -> CertFiles {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("certificate parameters");
        let common_name = stem.strip_prefix("client-").unwrap_or(stem);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages.to_vec();
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a signed certificate");
        CertFiles {
            cert: write(self.dir.path(), &format!("{stem}.pem"), &cert.pem()),
            key: write(
                self.dir.path(),
                &format!("{stem}.key"),
                &key.serialize_pem(),
            ),
        }
    }
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).expect("write a PEM file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
        .expect("make a PEM file readable");
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_signs_servers_and_named_clients() {
        let ca = TestCa::shared();
        let alice = ca.client("alice");
        assert_eq!(ca.client("alice").cert, alice.cert, "made once");
        for file in [
            &ca.ca,
            &ca.server.cert,
            &ca.server.key,
            &alice.cert,
            &alice.key,
        ] {
            let pem = std::fs::read_to_string(file).unwrap();
            assert!(pem.starts_with("-----BEGIN "), "{}", file.display());
        }
        assert_ne!(TestCa::stranger().ca, ca.ca);
        let options = ca.url_options("alice");
        assert!(options.contains("tls_ca=") && options.contains("client-alice.key"));
    }
}
