//! A `mysql://` or `mariadb://` URL: sqlx's connect options, and what is
//! read at connect (the password file, the TLS files).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use lock_core::backend::QueryOptions;
use lock_core::secret::PASSWORD_FILE;
use lock_core::tls::TlsOptions;
use lock_core::url::redact;
use lock_core::{Error, Result};
use sqlx::mysql::MySqlConnectOptions;

use crate::config::{COMMON, CommonOptions, Shown, driver_url, password_file};
use crate::tls::Tls;

/// Options handed to sqlx unchanged: its TLS options, accepted unless the
/// shared names are given.
const PASSTHROUGH: &[&str] = &["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"];
const DRIVER_TLS: &[&str] = PASSTHROUGH;

/// The parts of a `mysql://` or `mariadb://` URL.
pub(crate) struct Config {
    pub(super) common: CommonOptions,
    pub(super) options: MySqlConnectOptions,
    /// The URL without its password, for `Debug`.
    pub(super) redacted: String,
    pub(super) password_file: Option<PathBuf>,
    pub(super) tls: Tls,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = Shown {
            redacted: &self.redacted,
            common: &self.common,
            password_file: self.password_file.as_deref(),
            tls: &self.tls,
        };
        shown.fmt("MySql", f)
    }
}

impl Config {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut q = QueryOptions::parse(url)?;
        let common = CommonOptions::take(&mut q, url)?;
        let password_file = password_file(url, &mut q)?;
        let tls = Tls::take(&mut q, url, DRIVER_TLS)?;
        let sqlx_url = driver_url(url, &mut q, PASSTHROUGH);
        q.finish(
            &[
                COMMON,
                &[PASSWORD_FILE],
                &TlsOptions::URL_OPTIONS,
                PASSTHROUGH,
            ]
            .concat(),
        )?;
        // sqlx knows the `mysql` scheme only; both name the same protocol.
        let sqlx_url = sqlx_url
            .strip_prefix("mariadb:")
            .map_or(sqlx_url.clone(), |rest| format!("mysql:{rest}"));
        let options = MySqlConnectOptions::from_str(&sqlx_url)
            .map_err(|e| Error::invalid_url(url, e.to_string()))?;
        Ok(Self {
            common,
            options,
            redacted: redact(url),
            password_file,
            tls,
        })
    }
}
