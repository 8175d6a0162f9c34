//! The server-side limits every pooled session gets from the configured
//! timeout, so that the server stops a statement the client gave up on.

use std::time::Duration;

use sqlx::AssertSqlSafe;
use sqlx::mysql::MySqlConnection;
use tokio::sync::OnceCell;

use crate::config::server::server_limit;

/// Which server a `mysql://` or `mariadb://` URL reached: their statement
/// limits differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavour {
    MySql,
    MariaDb,
}

impl Flavour {
    /// From `SELECT VERSION()`: MariaDB says so (`10.11.6-MariaDB-…`).
    fn of(version: &str) -> Self {
        if version.to_ascii_lowercase().contains("mariadb") {
            Self::MariaDb
        } else {
            Self::MySql
        }
    }
}

/// The server-side limits every pooled session gets, from the configured
/// timeout, set when the pool opens the connection.
#[derive(Debug)]
pub(super) struct SessionLimits {
    timeout: Duration,
    /// The `SET` statement, made once the first connection has told which
    /// server it reached.
    set: OnceCell<String>,
}

impl SessionLimits {
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            set: OnceCell::new(),
        }
    }

    pub(super) async fn apply(
        &self,
        conn: &mut MySqlConnection,
    ) -> std::result::Result<(), sqlx::Error> {
        let set = self
            .set
            .get_or_try_init(|| async {
                let version: String = sqlx::query_scalar("SELECT VERSION()")
                    .fetch_one(&mut *conn)
                    .await?;
                Ok::<_, sqlx::Error>(set_limits(Flavour::of(&version), self.timeout))
            })
            .await?;
        sqlx::raw_sql(AssertSqlSafe(set.as_str()))
            .execute(conn)
            .await?;
        Ok(())
    }
}

/// The `SET` for one server. `innodb_lock_wait_timeout` bounds a wait for a
/// row lock, on both servers, in whole seconds; MariaDB's
/// `max_statement_time` bounds the whole statement, to the microsecond.
/// MySQL has nothing alike for writes (`max_execution_time` stops `SELECT`s
/// only). Both are rounded up, since a limit of zero means none and the
/// client's own limit is a second longer anyway, and kept within what the
/// servers accept.
fn set_limits(flavour: Flavour, timeout: Duration) -> String {
    const MAX_LOCK_WAIT_S: u128 = 1 << 30;
    const MAX_STATEMENT_US: u128 = 31_536_000 * 1_000_000;
    let lock_wait = server_limit(timeout, Duration::from_secs(1), MAX_LOCK_WAIT_S);
    let lock_wait = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}");
    match flavour {
        Flavour::MySql => lock_wait,
        Flavour::MariaDb => {
            let us = server_limit(timeout, Duration::from_micros(1), MAX_STATEMENT_US);
            let (s, us) = (us / 1_000_000, us % 1_000_000);
            format!("{lock_wait}, max_statement_time = {s}.{us:06}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_flavour_comes_from_its_version() {
        assert_eq!(Flavour::of("10.11.6-MariaDB-0+deb12u1"), Flavour::MariaDb);
        assert_eq!(Flavour::of("5.5.5-10.6.12-mariadb-log"), Flavour::MariaDb);
        assert_eq!(Flavour::of("8.0.36"), Flavour::MySql);
        assert_eq!(Flavour::of("8.4.0-commercial"), Flavour::MySql);
    }

    #[test]
    fn session_limits_follow_the_timeout_rounded_up() {
        let ms = Duration::from_millis;
        let cases = [
            (
                Flavour::MariaDb,
                ms(5000),
                "SET SESSION innodb_lock_wait_timeout = 5, max_statement_time = 5.000000",
            ),
            (
                Flavour::MariaDb,
                ms(1500),
                "SET SESSION innodb_lock_wait_timeout = 2, max_statement_time = 1.500000",
            ),
            (
                Flavour::MariaDb,
                ms(250),
                "SET SESSION innodb_lock_wait_timeout = 1, max_statement_time = 0.250000",
            ),
            (
                Flavour::MariaDb,
                Duration::from_nanos(1),
                "SET SESSION innodb_lock_wait_timeout = 1, max_statement_time = 0.000001",
            ),
            (
                Flavour::MariaDb,
                Duration::from_secs(10 << 30),
                "SET SESSION innodb_lock_wait_timeout = 1073741824, max_statement_time = 31536000.000000",
            ),
            (
                Flavour::MySql,
                ms(250),
                "SET SESSION innodb_lock_wait_timeout = 1",
            ),
            (
                Flavour::MySql,
                ms(2001),
                "SET SESSION innodb_lock_wait_timeout = 3",
            ),
        ];
        for (flavour, timeout, set) in cases {
            assert_eq!(set_limits(flavour, timeout), set, "{flavour:?} {timeout:?}");
        }
    }
}
