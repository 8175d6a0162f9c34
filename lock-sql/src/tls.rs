//! The shared TLS vocabulary (`tls`, `tls_ca`, `tls_cert`, `tls_key`) on
//! PostgreSQL and MySQL/MariaDB, beside sqlx's own names (`sslmode`,
//! `ssl-mode`, `sslrootcert`, …), which stay accepted. One URL uses one
//! vocabulary: mixing them could only contradict or repeat, so it is
//! refused.
//!
//! With the shared names the server is always verified (PostgreSQL
//! `verify-full`, MySQL `VERIFY_IDENTITY`); the files are read and checked
//! when the backend connects (`TlsOptions::load`), so a missing or wrong
//! file is an error naming the backend and the option.

use lock_core::backend::QueryOptions;
use lock_core::tls::{TlsMaterial, TlsOptions};
use lock_core::{Error, Result};

/// What a URL asks of TLS in the shared vocabulary.
#[derive(Clone, Debug, Default)]
pub(crate) enum Tls {
    /// Nothing said: the driver's own names, or its default.
    #[default]
    Driver,
    /// `tls=false`: plain text only.
    Off,
    /// TLS with the server verified.
    On(TlsOptions),
}

impl Tls {
    /// Takes the shared names out of `q` (the query of `url`);
    /// `driver_names` are the dialect's own TLS options, refused beside
    /// them.
    pub(crate) fn take(q: &mut QueryOptions, url: &str, driver_names: &[&str]) -> Result<Self> {
        let shared: Vec<&str> = TlsOptions::URL_OPTIONS
            .into_iter()
            .filter(|k| q.contains(k))
            .collect();
        if shared.is_empty() {
            return Ok(Self::Driver);
        }
        if let Some(theirs) = driver_names.iter().find(|k| q.contains(k)) {
            return Err(Error::invalid_url(
                url,
                format!(
                    "option \"{theirs}\" is the driver's name for TLS, and \"{}\" the shared one: give either tls/tls_ca/tls_cert/tls_key or the driver's names, not both",
                    shared[0]
                ),
            ));
        }
        let options = TlsOptions::from_query(q, false)?;
        Ok(if options.is_enabled() {
            Self::On(options)
        } else {
            Self::Off
        })
    }

    /// Reads the files of [`Tls::On`], for `backend` (named in errors).
    fn load(&self, backend: &'static str) -> Result<Option<TlsMaterial>> {
        match self {
            Self::On(options) => options.load(backend),
            _ => Ok(None),
        }
    }
}

/// The CA certificates to hand sqlx, which adds them to its public
/// (webpki) roots: `tls_ca`'s, or else what `tls=true` trusts on every
/// other backend, the public roots and the system's store, without the
/// system certificates rustls cannot use (sqlx would fail every connect on
/// the first of them).
fn extra_roots(material: &TlsMaterial) -> Vec<u8> {
    material.roots_pem()
}

#[cfg(feature = "postgres")]
pub(crate) fn postgres(
    tls: &Tls,
    options: sqlx::postgres::PgConnectOptions,
) -> Result<sqlx::postgres::PgConnectOptions> {
    use sqlx::postgres::PgSslMode;
    let mut options = match tls {
        Tls::Driver => return Ok(options),
        Tls::Off => return Ok(options.ssl_mode(PgSslMode::Disable)),
        Tls::On(_) => options.ssl_mode(PgSslMode::VerifyFull),
    };
    if let Some(material) = tls.load(crate::POSTGRES_NAME)? {
        options = options.ssl_root_cert_from_pem(extra_roots(&material));
        if let Some((cert, key)) = material.identity_pem() {
            options = options
                .ssl_client_cert_from_pem(cert)
                .ssl_client_key_from_pem(key);
        }
    }
    Ok(options)
}

#[cfg(feature = "mysql")]
pub(crate) fn mysql(
    tls: &Tls,
    options: sqlx::mysql::MySqlConnectOptions,
) -> Result<sqlx::mysql::MySqlConnectOptions> {
    use sqlx::mysql::MySqlSslMode;
    let mut options = match tls {
        Tls::Driver => return Ok(options),
        Tls::Off => return Ok(options.ssl_mode(MySqlSslMode::Disabled)),
        Tls::On(_) => options.ssl_mode(MySqlSslMode::VerifyIdentity),
    };
    if let Some(material) = tls.load(crate::MYSQL_NAME)? {
        options = options.ssl_ca_from_pem(extra_roots(&material));
        if let Some((cert, key)) = material.identity_pem() {
            options = options
                .ssl_client_cert_from_pem(cert)
                .ssl_client_key_from_pem(key);
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(url: &str, driver: &[&str]) -> Result<Tls> {
        let mut q = QueryOptions::parse(url)?;
        Tls::take(&mut q, url, driver)
    }

    #[test]
    fn the_shared_names_turn_verified_tls_on_or_off() {
        assert!(matches!(take("x://h", &["sslmode"]), Ok(Tls::Driver)));
        assert!(matches!(
            take("x://h?sslmode=require", &["sslmode"]),
            Ok(Tls::Driver)
        ));
        assert!(matches!(
            take("x://h?tls=false", &["sslmode"]),
            Ok(Tls::Off)
        ));
        let Ok(Tls::On(on)) = take("x://h?tls_ca=/ca.pem", &["sslmode"]) else {
            panic!("tls_ca turns TLS on")
        };
        assert_eq!(on.ca_path(), Some(std::path::Path::new("/ca.pem")));
    }

    #[test]
    fn mixing_the_vocabularies_is_refused() {
        for url in [
            "x://h?tls=true&sslmode=disable",
            "x://h?tls_ca=/a&sslrootcert=/b",
            "x://h?tls=false&sslmode=verify-full",
        ] {
            let err = take(url, &["sslmode", "sslrootcert"]).unwrap_err();
            let text = err.to_string();
            assert!(
                err.is_invalid_input() && text.contains("not both"),
                "{url}: {text}"
            );
        }
    }
}
