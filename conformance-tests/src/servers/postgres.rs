//! PostgreSQL from the `postgresql` package: `initdb` as the `postgres`
//! user, then `postgres` on a free loopback port.

use std::path::{Path, PathBuf};

use tokio::sync::OnceCell;

use super::backends::POSTGRES;
use super::ports::start_on_loopback;
use super::tls::TestCa;
use super::url::ServerUrl;
use super::{SqlInstance, Supervised, as_user_args, data_dir, find_binary, run_as};

const LABEL: &str = "postgres";
const LABEL_TLS: &str = "postgres (TLS only)";
const USER: &str = "distlock";
const PASSWORD: &str = "pg-test-secret";
const BIN_DIRS: &[&str] = &["/usr/lib/postgresql/*/bin"];

/// Starts postgres servers.
#[derive(Debug)]
pub struct Postgres;

impl Postgres {
    /// Starts a new server of its own (for tests that stop or restart it).
    pub async fn start() -> SqlInstance {
        Self::launch(false).await
    }

    /// Starts a TLS-only server: `ssl=on` with the test CA's server
    /// certificate, and one `hostssl … clientcert=verify-full` line (no
    /// `host` line), so a client needs TLS, the test CA's trust, a client
    /// certificate whose CN is the user, and the password. Its URL carries
    /// the TLS options for the client certificate `distlock`.
    pub async fn start_tls() -> SqlInstance {
        Self::launch(true).await
    }

    /// The TLS-only server shared by every test in this test binary.
    pub async fn shared_tls() -> &'static SqlInstance {
        static SHARED: OnceCell<SqlInstance> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
    }

    async fn launch(tls: bool) -> SqlInstance {
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
            let postgres = postgres.to_string_lossy();
            let (data_arg, dir_arg) = (data.to_string_lossy(), dir.to_string_lossy());
            let mut args: Vec<String> = [
                &*postgres,
                "-D",
                &data_arg,
                "-p",
                &port_arg,
                "-k",
                &dir_arg,
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=400",
            ]
            .map(String::from)
            .to_vec();
            if tls {
                args.extend(tls_only(&data));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let command = as_user_args("postgres", &args);
            let command: Vec<&str> = command.iter().map(String::as_str).collect();
            // SIGINT is PostgreSQL's fast shutdown: it does not wait for clients.
            let url = ServerUrl::local(
                distlock::backends::sql::POSTGRES_SCHEMES[0],
                Some(&format!("{USER}:{PASSWORD}")),
                &[format!("127.0.0.1:{port}")],
                "postgres",
            );
            let server = SqlInstance {
                label: if tls { LABEL_TLS } else { LABEL },
                url: if tls {
                    url.with_query(TestCa::shared().url_options(USER))
                } else {
                    url
                },
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

/// Makes the server in `data` TLS-only, and returns its settings: the test
/// CA's server certificate and key copied into the data directory (the
/// server wants its key owned by its own user, mode 0600), and a
/// `pg_hba.conf` with no line for plain TCP.
fn tls_only(data: &Path) -> Vec<String> {
    let ca = TestCa::shared();
    let (cert, key) = (data.join("server.crt"), data.join("server.key"));
    for (from, to) in [(&ca.server.cert, &cert), (&ca.server.key, &key)] {
        run_as(
            Some("postgres"),
            &["cp", &from.to_string_lossy(), &to.to_string_lossy()],
        );
    }
    run_as(Some("postgres"), &["chmod", "0600", &key.to_string_lossy()]);
    let hba = data.join("pg_hba.conf");
    let lines = "local all all trust\n\
                 hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n";
    run_as(
        Some("postgres"),
        &[
            "sh",
            "-c",
            &format!("printf '{lines}' > '{}'", hba.display()),
        ],
    );
    [
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", cert.display()),
        format!("ssl_key_file={}", key.display()),
        format!("ssl_ca_file={}", ca.ca.display()),
    ]
    .into_iter()
    .flat_map(|setting| ["-c".to_owned(), setting])
    .collect()
}
