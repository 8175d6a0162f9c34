//! PostgreSQL from the `postgresql` package: `initdb` as the `postgres`
//! user, then `postgres` on a free loopback port.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::OnceCell;

use lock_core::async_trait;

use super::{
    SqlServer, Supervised, as_user_args, data_dir, find_binary, free_port, run_as, wait_until_ready,
};

const USER: &str = "distlock";
const PASSWORD: &str = "pg-test-secret";
const BIN_DIRS: &[&str] = &["/usr/lib/postgresql/*/bin"];

/// A running PostgreSQL server with a password-protected superuser.
#[derive(Debug)]
pub struct Postgres {
    port: u16,
    process: Supervised,
}

impl Postgres {
    /// Starts a new server of its own (for tests that stop or restart it).
    pub async fn start() -> Self {
        let initdb = find_binary("initdb", BIN_DIRS, "postgresql");
        let postgres = find_binary("postgres", BIN_DIRS, "postgresql");
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
        let port = free_port();
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
        let server = Self {
            port,
            process: Supervised::start(&dir, "INT", &command),
        };
        server.wait_ready().await;
        server
    }

    /// One server shared by every test in this test binary.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<Postgres> = OnceCell::const_new();
        SHARED.get_or_init(Self::start).await
    }
}

#[async_trait]
impl SqlServer for Postgres {
    fn label(&self) -> &'static str {
        "postgres"
    }

    fn url(&self, query: &str) -> String {
        self.url_via(self.port, query)
    }

    fn url_via(&self, port: u16, query: &str) -> String {
        let base = format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres");
        if query.is_empty() {
            base
        } else {
            format!("{base}?{query}")
        }
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn password(&self) -> &'static str {
        PASSWORD
    }

    fn process(&self) -> &Supervised {
        &self.process
    }

    async fn wait_ready(&self) {
        let url = self.url("table=distlock_ready&connect_timeout=1s");
        wait_until_ready(
            "postgres",
            Duration::from_secs(60),
            || self.process.log(),
            || async { distlock::connect_backend(&url).await.is_ok() },
        )
        .await;
    }
}
