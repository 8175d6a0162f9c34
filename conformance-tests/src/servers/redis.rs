//! Redis from the `redis-server` package, on a free loopback port, with no
//! persistence and an ACL user with a password (the default user is off);
//! or the server `DISTLOCK_TEST_REDIS_URL` names, and the masters
//! `DISTLOCK_TEST_REDLOCK_URL` names. A TLS-only variant (`--port 0`,
//! `--tls-port`) presents the certificate of [`TestCa::shared`] and
//! requires client certificates signed by it.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::backends::{REDIS, REDLOCK};
use super::external::external;
use super::ports::{PortTaken, start_on_loopback, wait_started};
use super::tls::TestCa;
use super::url::ServerUrl;
use super::{Supervised, data_dir, find_binary, log_of, started, wait_until_ready};

/// The ACL user of the servers the harness starts (the default user is
/// off).
pub(super) const USER: &str = "distlock";
const PASSWORD: &str = "redis-test-secret";

/// A running `redis-server`.
#[derive(Debug)]
pub struct Redis {
    url: ServerUrl,
    process: Option<Supervised>,
    /// Whether it takes TLS only, with [`TestCa::shared`]'s certificates.
    tls: bool,
}

impl Redis {
    /// The password of the servers the harness starts.
    pub const PASSWORD: &'static str = PASSWORD;

    /// Starts a new server of its own.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts a replica of `primary`, replicating asynchronously as Redis
    /// does; over TLS if `primary` takes TLS only.
    pub async fn replica_of(primary: &Redis) -> Self {
        let port = primary.port().to_string();
        let replicate = [
            "--replicaof",
            "127.0.0.1",
            &port,
            "--masteruser",
            USER,
            "--masterauth",
            PASSWORD,
        ];
        let tls: &[&str] = if primary.tls {
            &["--tls-replication", "yes"]
        } else {
            &[]
        };
        Self::start_as(primary.tls, &[&replicate[..], tls].concat()).await
    }

    /// Starts a new server with these extra `redis-server` arguments (e.g.
    /// `--maxmemory 1mb`).
    pub async fn start_with(extra: &[&str]) -> Self {
        Self::start_as(false, extra).await
    }

    /// Starts a server that takes TLS only: [`url`](Self::url) carries the
    /// options that get through (the CA and the client certificate
    /// `distlock` of [`TestCa::shared`]).
    pub async fn start_tls() -> Self {
        Self::start_as(true, &[]).await
    }

    /// [`start_with`](Self::start_with), TLS-only if `tls`.
    pub(super) async fn start_as(tls: bool, extra: &[&str]) -> Self {
        start_on_loopback("redis", 1, |ports| async move {
            let redis = Self::spawn_as(tls, ports[0], extra);
            redis.wait_started(&[]).await?;
            Ok(redis)
        })
        .await
    }

    /// Starts a server on `port` without waiting for it, so that several
    /// boot at once; TLS-only if `tls` (`port` is then the TLS port, and
    /// `extra` may add `--tls-replication yes` and `--tls-cluster yes`).
    pub(super) fn spawn_as(tls: bool, port: u16, extra: &[&str]) -> Self {
        let server = find_binary("redis-server", &[], "redis-server")
            .to_string_lossy()
            .into_owned();
        let dir = data_dir("root");
        let port_arg = port.to_string();
        let dir_arg = dir.to_string_lossy().into_owned();
        let secret = format!(">{PASSWORD}");
        let pki = TestCa::shared();
        let (cert, key, ca) = (
            pki.server.cert.to_string_lossy(),
            pki.server.key.to_string_lossy(),
            pki.ca.to_string_lossy(),
        );
        let listen = if tls {
            vec![
                "--port",
                "0",
                "--tls-port",
                &port_arg,
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                "yes",
            ]
        } else {
            vec!["--port", &port_arg]
        };
        let mut command = vec![server.as_str()];
        command.extend(listen);
        command.extend([
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir_arg,
            "--save",
            "",
            "--appendonly",
            "no",
            // A replica is in sync at once rather than after five seconds.
            "--repl-diskless-sync-delay",
            "0",
            // Nobody may log in as the default user, but it keeps every
            // permission: Redis 7.0 replays the append-only file's
            // transactions (a script's writes) as the default user, and
            // drops those it may not run (redis/redis#14541).
            "--user",
            "default",
            "off",
            "~*",
            "&*",
            "+@all",
            "--user",
            USER,
            "on",
            &secret,
            "~*",
            "&*",
            "+@all",
        ]);
        command.extend_from_slice(extra);
        let scheme = if tls { "rediss" } else { "redis" };
        let url = ServerUrl::local(
            scheme,
            Some(&format!("{USER}:{PASSWORD}")),
            &[format!("127.0.0.1:{port}")],
            "",
        );
        let process = Supervised::start(&dir, "TERM", &command);
        let mut redis = Self::at(url, Some(process));
        if tls {
            redis = redis.with_tls();
        }
        redis
    }

    /// A server at `url`, with its process if the harness started it.
    pub(super) fn at(url: ServerUrl, process: Option<Supervised>) -> Self {
        Self {
            url,
            process,
            tls: false,
        }
    }

    /// The same server, known to take TLS only with [`TestCa::shared`]'s
    /// certificates: its URLs and `redis-cli` use them.
    pub(super) fn with_tls(self) -> Self {
        let options = TestCa::shared().url_options(USER);
        Self {
            url: self.url.with_query(&options),
            tls: true,
            ..self
        }
    }

    /// One server shared by every test in this test binary: the one
    /// `DISTLOCK_TEST_REDIS_URL` names, if set.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<Redis> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                match external(&REDIS, "").await {
                    Some(url) => Self::at(url, None),
                    None => Self::start().await,
                }
            })
            .await
    }

    /// One TLS-only server shared by every test in this test binary.
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<Redis> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
    }

    /// Whether it takes TLS only (its URLs carry the TLS options).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// A URL for this server with the given query string (no leading `?`).
    pub fn url(&self, query: &str) -> String {
        self.url.url(query)
    }

    /// The same URL, through another port (a proxy's).
    pub fn url_via(&self, port: u16, query: &str) -> String {
        self.url.url_via(port, query)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url.port()
    }

    /// Its address, for a proxy in front of it.
    pub fn socket_addr(&self) -> SocketAddr {
        self.url.socket_addr()
    }

    /// The password in its URLs.
    pub fn password(&self) -> &str {
        self.url
            .password()
            .expect("the harness's servers and DISTLOCK_TEST_REDIS_URL's have one")
    }

    /// The process, to stop, pause or restart it.
    pub fn process(&self) -> &Supervised {
        started(&self.process, &self.url.redacted())
    }

    /// Its log, if the harness started it (for failure messages).
    pub fn log(&self) -> String {
        log_of(&self.process)
    }

    /// Waits until a server just spawned listens on its port and on
    /// `more_ports`, and answers; [`PortTaken`] if it could not listen.
    pub(super) async fn wait_started(&self, more_ports: &[u16]) -> Result<(), PortTaken> {
        let ports = [&[self.port()], more_ports].concat();
        wait_started(
            "redis",
            Duration::from_secs(30),
            &[(self.process(), ports)],
            || async { self.pings() },
        )
        .await
    }

    fn pings(&self) -> bool {
        self.cli(&["PING"]).is_some_and(|out| out.trim() == "PONG")
    }

    /// Waits until it answers.
    pub async fn wait_ready(&self) {
        wait_until_ready(
            "redis",
            Duration::from_secs(30),
            || log_of(&self.process),
            || async { self.pings() },
        )
        .await;
    }

    /// This server's entry in a `redlock://` host list.
    pub fn redlock_host(&self) -> String {
        self.url.authority()
    }

    /// The same entry, through another port (a proxy's).
    pub fn redlock_host_via(&self, port: u16) -> String {
        self.url.via(port).authority()
    }

    /// Runs `redis-cli` against this server as the test user; `None` if it
    /// failed.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        answer(self.cli_command(args).output().ok()?)
    }

    /// [`Redis::cli`] without blocking the runtime, giving up after
    /// `limit`: a frozen server (SIGSTOP) answers nothing, and pollers
    /// must not hang on it.
    pub(super) async fn cli_within(&self, limit: Duration, args: &[&str]) -> Option<String> {
        let mut command = tokio::process::Command::from(self.cli_command(args));
        command.kill_on_drop(true);
        let out = tokio::time::timeout(limit, command.output())
            .await
            .ok()?
            .ok()?;
        answer(out)
    }

    fn cli_command(&self, args: &[&str]) -> Command {
        let cli = find_binary("redis-cli", &[], "redis-tools");
        let mut command = Command::new(cli);
        command.args(["-h", self.url.hostname(), "-p", &self.port().to_string()]);
        if let Some(user) = self.url.user() {
            command.args(["--user", user]);
        }
        if let Some(password) = self.url.password() {
            command.args(["--pass", password]);
        }
        if !self.url.path().is_empty() {
            command.args(["-n", self.url.path()]);
        }
        if self.tls {
            command.args(tls_cli_args());
        } else if self.url.scheme() == "rediss" {
            command.arg("--tls");
        }
        command.arg("--no-auth-warning").args(args);
        command
    }
}

/// What makes `redis-cli` reach a TLS-only server of the harness.
pub(super) fn tls_cli_args() -> Vec<std::ffi::OsString> {
    let pki = TestCa::shared();
    let client = pki.client(USER);
    let mut args: Vec<std::ffi::OsString> = vec!["--tls".into(), "--cacert".into()];
    args.extend([pki.ca.clone().into(), "--cert".into(), client.cert.into()]);
    args.extend(["--key".into(), client.key.into()]);
    args
}

/// The value of `name` in `INFO`-style `name:value` lines.
pub(super) fn info_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// What `redis-cli` printed, if it succeeded.
fn answer(out: std::process::Output) -> Option<String> {
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Independent masters for Redlock: no replication between them.
#[derive(Debug)]
pub struct RedisSet {
    /// The masters.
    pub nodes: Vec<Redis>,
    /// The URL `DISTLOCK_TEST_REDLOCK_URL` holds, for masters it names.
    external: Option<ServerUrl>,
}

impl RedisSet {
    /// Starts `n` independent servers.
    pub async fn start(n: usize) -> Self {
        Self::start_as(false, n).await
    }

    /// Starts `n` independent TLS-only servers (see [`Redis::start_tls`]).
    pub async fn start_tls(n: usize) -> Self {
        Self::start_as(true, n).await
    }

    async fn start_as(tls: bool, n: usize) -> Self {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(Redis::start_as(tls, &[]).await);
        }
        Self {
            nodes,
            external: None,
        }
    }

    /// Five masters shared by every test in this test binary: those
    /// `DISTLOCK_TEST_REDLOCK_URL` names, if set.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<RedisSet> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                match external(&REDLOCK, "").await {
                    Some(url) => Self {
                        nodes: (0..url.addresses().len())
                            .map(|i| {
                                Redis::at(url.host(i, distlock::backends::redis::SCHEMES[0]), None)
                            })
                            .collect(),
                        external: Some(url),
                    },
                    None => Self::start(5).await,
                }
            })
            .await
    }

    /// Three TLS-only masters shared by every test in this test binary.
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<RedisSet> = OnceCell::const_new();
        SHARED.get_or_init(|| Self::start_tls(3)).await
    }

    /// A `redlock://` URL for every node, with the given query string (and
    /// the TLS options, for TLS-only masters).
    pub fn url(&self, query: &str) -> String {
        if let Some(url) = &self.external {
            return url.url(query);
        }
        let hosts: Vec<String> = self.nodes.iter().map(Redis::redlock_host).collect();
        let base = format!(
            "{}://{}",
            distlock::backends::redlock::SCHEMES[0],
            hosts.join(",")
        );
        let tls = match self.nodes.first() {
            Some(node) if node.is_tls() => TestCa::shared().url_options(USER),
            _ => String::new(),
        };
        let query: Vec<&str> = [tls.as_str(), query]
            .into_iter()
            .filter(|q| !q.is_empty())
            .collect();
        if query.is_empty() {
            base
        } else {
            format!("{base}?{}", query.join("&"))
        }
    }
}
