//! MariaDB from the `mariadb-server` package: `mariadb-install-db`, then
//! `mariadbd` on a free loopback port, with a password-protected user.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::backends::MYSQL;
use super::ports::{start_on_loopback, wait_started};
use super::tls::TestCa;
use super::url::ServerUrl;
use super::{SqlInstance, Supervised, data_dir, find_binary, run_as};

const LABEL: &str = "mariadb";
const LABEL_TLS: &str = "mariadb (TLS only)";
const USER: &str = "distlock";
const PASSWORD: &str = "maria-test-secret";
const DATABASE: &str = "distlock";
const SBIN: &[&str] = &["/usr/sbin", "/usr/bin"];

/// Starts mariadb servers.
#[derive(Debug)]
pub struct Mariadb;

impl Mariadb {
    /// Starts a new server of its own (for tests that stop or restart it).
    pub async fn start() -> SqlInstance {
        Self::launch(false).await
    }

    /// Starts a server that takes TLS only (`require_secure_transport`),
    /// with the test CA's server certificate, whose user must also present
    /// a client certificate of the test CA (`REQUIRE X509`). Its URL
    /// carries the TLS options for the client certificate `distlock`.
    pub async fn start_tls() -> SqlInstance {
        Self::launch(true).await
    }

    /// The TLS-only server shared by every test in this test binary.
    pub async fn shared_tls() -> &'static SqlInstance {
        static SHARED: OnceCell<SqlInstance> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
    }

    async fn launch(tls: bool) -> SqlInstance {
        let install = find_binary("mariadb-install-db", SBIN, "mariadb-server");
        let mariadbd = find_binary("mariadbd", SBIN, "mariadb-server");
        let client = find_binary("mariadb", SBIN, "mariadb-client");
        let (install, mariadbd, client) = (&install, &mariadbd, &client);
        // Each attempt has a new directory: the old one goes with its
        // watchdog.
        start_on_loopback("mariadb", 1, |ports| async move {
            let dir = data_dir("mysql");
            let data = dir.join("data");
            let socket = dir.join("mysqld.sock");
            let root = nix::unistd::geteuid().is_root();
            let user_arg = "--user=mysql";
            let mut install_args = vec![
                install.to_string_lossy().into_owned(),
                "--no-defaults".into(),
                format!("--datadir={}", data.display()),
                "--auth-root-authentication-method=socket".into(),
                "--skip-test-db".into(),
            ];
            if root {
                install_args.push(user_arg.into());
            }
            let install_args: Vec<&str> = install_args.iter().map(String::as_str).collect();
            run_as(None, &install_args);
            let port = ports[0];
            let mut command = vec![
                mariadbd.to_string_lossy().into_owned(),
                "--no-defaults".into(),
                format!("--datadir={}", data.display()),
                format!("--port={port}"),
                "--bind-address=127.0.0.1".into(),
                format!("--socket={}", socket.display()),
                format!("--pid-file={}", dir.join("mysqld.pid").display()),
                "--skip-name-resolve".into(),
                "--innodb-buffer-pool-size=64M".into(),
                "--max-connections=400".into(),
            ];
            if root {
                command.push(user_arg.into());
            }
            let ca = TestCa::shared();
            if tls {
                command.extend([
                    format!("--ssl-ca={}", ca.ca.display()),
                    format!("--ssl-cert={}", ca.server.cert.display()),
                    format!("--ssl-key={}", ca.server.key.display()),
                    "--require-secure-transport=ON".into(),
                ]);
            }
            let require = if tls { " REQUIRE X509" } else { "" };
            let command: Vec<&str> = command.iter().map(String::as_str).collect();
            let process = Supervised::start(&dir, "TERM", &command);
            let setup = format!(
                "CREATE DATABASE IF NOT EXISTS {DATABASE};
                 CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'{require};
                 GRANT ALL ON {DATABASE}.* TO '{USER}'@'127.0.0.1' WITH GRANT OPTION;
                 GRANT CREATE USER ON *.* TO '{USER}'@'127.0.0.1';"
            );
            wait_started(
                "mariadb",
                Duration::from_secs(60),
                &[(&process, vec![port])],
                || async { root_sql(client, &socket, &setup) },
            )
            .await?;
            let url = ServerUrl::local(
                distlock::backends::sql::MYSQL_SCHEMES[1],
                Some(&format!("{USER}:{PASSWORD}")),
                &[format!("127.0.0.1:{port}")],
                DATABASE,
            );
            let server = SqlInstance {
                label: if tls { LABEL_TLS } else { LABEL },
                url: if tls {
                    url.with_query(ca.url_options(USER))
                } else {
                    url
                },
                process: Some(process),
            };
            server.wait_started().await?;
            Ok(server)
        })
        .await
    }

    /// One server shared by every test in this test binary: the one
    /// `DISTLOCK_TEST_MYSQL_URL` names, if set.
    pub async fn shared() -> &'static SqlInstance {
        static SHARED: OnceCell<SqlInstance> = OnceCell::const_new();
        SHARED
            .get_or_init(|| SqlInstance::shared(LABEL, &MYSQL, Self::start))
            .await
    }
}

/// Runs SQL as the server's root account over its socket (MariaDB lets the
/// system's root in without a password there).
fn root_sql(client: &Path, socket: &Path, sql: &str) -> bool {
    Command::new(client)
        .arg("--no-defaults")
        .arg(format!("--socket={}", socket.display()))
        .args(["-u", "root", "-e", sql])
        .output()
        .is_ok_and(|o| o.status.success())
}
