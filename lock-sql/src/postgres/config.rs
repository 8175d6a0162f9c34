//! A `postgres://` URL: sqlx's connect options, the locks table's place,
//! and what is read at connect (the password file, the TLS files).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use lock_core::backend::QueryOptions;
use lock_core::{Error, Result};
use sqlx::postgres::PgConnectOptions;

use super::location::Location;
use crate::config::{ServerOptions, server_limit};
use crate::table::TableName;

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

/// The parts of a `postgres://` URL.
pub(crate) struct Config {
    pub(super) server: ServerOptions,
    pub(super) location: Location,
    pub(super) options: PgConnectOptions,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.server.fmt("Postgres", f)
    }
}

impl Config {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut q = QueryOptions::parse(url)?;
        let schema = q
            .take("schema")
            .map(|s| TableName::new(&s, url))
            .transpose()?;
        let (server, sqlx_url) = ServerOptions::take(url, q, &["schema"], DRIVER_TLS, PASSTHROUGH)?;
        let common = &server.common;
        let location = Location {
            schema,
            table: common.table.clone(),
        };
        let options = PgConnectOptions::from_str(&sqlx_url)
            .map_err(|e| Error::invalid_url(url, e.to_string()))?
            .options([("statement_timeout", statement_timeout_ms(common.timeout))]);
        Ok(Self {
            server,
            location,
            options,
        })
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
