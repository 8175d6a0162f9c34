//! The database of a `mysql://` or `mariadb://` URL: sqlx's connect
//! options, and what is read at connect (the password file, the TLS files).
//! The sessions' limits come from the `timeout` at connect
//! (`SessionLimits`, in `mysql/limits.rs`).

use std::fmt;
use std::str::FromStr;

use lock_core::backend::QueryOptions;
use lock_core::secret::read_password_file;
use lock_core::{Error, Result};
use sqlx::mysql::MySqlConnectOptions;

use super::server::ServerOptions;

/// Options handed to sqlx unchanged: its TLS options, accepted unless the
/// shared names are given.
const PASSTHROUGH: &[&str] = &["ssl-mode", "ssl-ca", "ssl-cert", "ssl-key"];
const DRIVER_TLS: &[&str] = PASSTHROUGH;

/// The database of a `mysql://` or `mariadb://` URL.
#[derive(Clone)]
pub(crate) struct Config {
    server: ServerOptions,
    options: MySqlConnectOptions,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.server.fmt("MySql", f)
    }
}

impl Config {
    /// Reads `url`, whose query `q` has had the common options taken out.
    pub(crate) fn parse(url: &str, q: QueryOptions) -> Result<Self> {
        let (server, sqlx_url) = ServerOptions::take(url, q, &[], DRIVER_TLS, PASSTHROUGH)?;
        // sqlx knows the `mysql` scheme only; both name the same protocol.
        let sqlx_url = sqlx_url
            .strip_prefix("mariadb:")
            .map_or(sqlx_url.clone(), |rest| format!("mysql:{rest}"));
        let options = MySqlConnectOptions::from_str(&sqlx_url)
            .map_err(|e| Error::invalid_url(url, e.to_string()))?;
        Ok(Self { server, options })
    }

    /// sqlx's options for a session: the URL's, with TLS and the password
    /// file read.
    pub(crate) fn connect_options(self) -> Result<MySqlConnectOptions> {
        let Self { server, options } = self;
        let mut options = crate::tls::mysql(&server.tls, options)?;
        if let Some(path) = &server.password_file {
            options = options.password(&read_password_file(crate::names::MYSQL_NAME, path)?);
        }
        Ok(options)
    }
}
