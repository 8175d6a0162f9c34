//! The database of a `postgres://` URL: sqlx's connect options, and what
//! is read or worked out at connect (the password file, the TLS files, the
//! session's `statement_timeout`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::secret::read_password_file;
use lock_core::{Error, Result};
use sqlx::postgres::PgConnectOptions;

use super::server::{ServerOptions, server_limit};

/// sqlx's own TLS options, accepted unless the shared names are given.
const DRIVER_TLS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Options handed to sqlx unchanged: its TLS options and the session's name.
const PASSTHROUGH: &[&str] = &[
    DRIVER_TLS[0],
    DRIVER_TLS[1],
    DRIVER_TLS[2],
    DRIVER_TLS[3],
    "application_name",
];

/// The database of a `postgres://` URL.
#[derive(Clone)]
pub(crate) struct Config {
    server: ServerOptions,
    /// The URL's, without the session's limit, which comes from the
    /// `timeout` at connect.
    options: PgConnectOptions,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.server.fmt("Postgres", f)
    }
}

impl Config {
    /// Reads `url`, whose query `q` has had the common options taken out.
    pub(crate) fn parse(url: &str, q: QueryOptions) -> Result<Self> {
        let (server, sqlx_url) = ServerOptions::take(url, q, &[], DRIVER_TLS, PASSTHROUGH)?;
        let options = PgConnectOptions::from_str(&sqlx_url)
            .map_err(|e| Error::invalid_url(url, e.to_string()))?;
        Ok(Self { server, options })
    }

    /// sqlx's options for a session: the URL's, with TLS and the password
    /// file read, and `timeout` as the session's `statement_timeout`.
    pub(crate) fn connect_options(self, timeout: Duration) -> Result<PgConnectOptions> {
        let Self { server, options } = self;
        let mut options = crate::tls::postgres(&server.tls, options)?;
        if let Some(path) = &server.password_file {
            options = options.password(&read_password_file(crate::names::POSTGRES_NAME, path)?);
        }
        Ok(options.options([("statement_timeout", statement_timeout_ms(timeout))]))
    }
}

/// `statement_timeout` in whole milliseconds, rounded up (zero would mean no
/// limit) and within the server's range.
fn statement_timeout_ms(timeout: Duration) -> String {
    const MAX_MS: u128 = i32::MAX as u128;
    server_limit(timeout, Duration::from_millis(1), MAX_MS).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_timeout_is_never_zero_nor_out_of_range() {
        assert_eq!(statement_timeout_ms(Duration::from_secs(5)), "5000");
        assert_eq!(statement_timeout_ms(Duration::from_micros(1500)), "2");
        assert_eq!(statement_timeout_ms(Duration::from_nanos(1)), "1");
        assert_eq!(
            statement_timeout_ms(Duration::from_secs(1 << 40)),
            i32::MAX.to_string()
        );
    }
}
