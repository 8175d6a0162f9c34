//! A `mysql://` or `mariadb://` URL: sqlx's connect options, and what is
//! read at connect (the password file, the TLS files).

use std::fmt;
use std::str::FromStr;

use lock_core::backend::QueryOptions;
use lock_core::{Error, Result};
use sqlx::mysql::MySqlConnectOptions;

use crate::config::ServerOptions;

/// Options handed to sqlx unchanged: its TLS options, accepted unless the
/// shared names are given.
const PASSTHROUGH: &[&str] = &["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"];
const DRIVER_TLS: &[&str] = PASSTHROUGH;

/// The parts of a `mysql://` or `mariadb://` URL.
pub(crate) struct Config {
    pub(super) server: ServerOptions,
    pub(super) options: MySqlConnectOptions,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.server.fmt("MySql", f)
    }
}

impl Config {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let q = QueryOptions::parse(url)?;
        let (server, sqlx_url) = ServerOptions::take(url, q, &[], DRIVER_TLS, PASSTHROUGH)?;
        // sqlx knows the `mysql` scheme only; both name the same protocol.
        let sqlx_url = sqlx_url
            .strip_prefix("mariadb:")
            .map_or(sqlx_url.clone(), |rest| format!("mysql:{rest}"));
        let options = MySqlConnectOptions::from_str(&sqlx_url)
            .map_err(|e| Error::invalid_url(url, e.to_string()))?;
        Ok(Self { server, options })
    }
}
