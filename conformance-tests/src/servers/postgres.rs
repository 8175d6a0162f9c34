//! PostgreSQL from the `postgresql` package: `initdb` as the `postgres`
//! user, then `postgres` on a free loopback port.

use std::path::PathBuf;

use tokio::sync::OnceCell;

use super::external::POSTGRES;
use super::ports::start_on_loopback;
use super::url::ServerUrl;
use super::{SqlInstance, Supervised, as_user_args, data_dir, find_binary, run_as};

const LABEL: &str = "postgres";
const USER: &str = "distlock";
const PASSWORD: &str = "pg-test-secret";
const BIN_DIRS: &[&str] = &["/usr/lib/postgresql/*/bin"];

/// Starts postgres servers.
#[derive(Debug)]
pub struct Postgres;

impl Postgres {
    /// Starts a new server of its own (for tests that stop or restart it).
    pub async fn start() -> SqlInstance {
        let initdb = find_binary("initdb", BIN_DIRS, "postgresql");
        let postgres = find_binary("postgres", BIN_DIRS, "postgresql");
        let (initdb, postgres) = (&initdb, &postgres);
        // Each attempt has a new directory: the old one goes with its
        // watchdog.
        start_on_loopback("postgres", 1, |ports| async move {
            let dir = data_dir("postgres");
            let data: PathBuf = dir.join("data");
            let pwfile = dir.join("pwfile");
            std::fs::write(&pwfile, PASSWORD).expect("write the password file");
            run_as(
                Some("postgres"),
                &[
                    &initdb.to_string_lossy(),
                    "--no-sync",
                    "--encoding=UTF8",
                    "--username",
                    USER,
                    "--pwfile",
                    &pwfile.to_string_lossy(),
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "-D",
                    &data.to_string_lossy(),
                ],
            );
            let port = ports[0];
            let port_arg = port.to_string();
            let command = as_user_args(
                "postgres",
                &[
                    &postgres.to_string_lossy(),
                    "-D",
                    &data.to_string_lossy(),
                    "-p",
                    &port_arg,
                    "-k",
                    &dir.to_string_lossy(),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "max_connections=400",
                ],
            );
            let command: Vec<&str> = command.iter().map(String::as_str).collect();
            // SIGINT is PostgreSQL's fast shutdown: it does not wait for clients.
            let server = SqlInstance {
                label: LABEL,
                url: ServerUrl::local(
                    distlock::lock_sql::POSTGRES_SCHEMES[0],
                    Some(&format!("{USER}:{PASSWORD}")),
                    &[format!("127.0.0.1:{port}")],
                    "postgres",
                ),
                process: Some(Supervised::start(&dir, "INT", &command)),
            };
            server.wait_started().await?;
            Ok(server)
        })
        .await
    }

    /// One server shared by every test in this test binary: the one
    /// `DISTLOCK_TEST_POSTGRES_URL` names, if set.
    pub async fn shared() -> &'static SqlInstance {
        static SHARED: OnceCell<SqlInstance> = OnceCell::const_new();
        SHARED
            .get_or_init(|| SqlInstance::shared(LABEL, &POSTGRES, Self::start))
            .await
    }
}
