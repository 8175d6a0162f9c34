//! Redis from the `redis-server` package, on a free loopback port, with no
//! persistence and an ACL user with a password (the default user is off).

use std::process::Command;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::{Supervised, data_dir, find_binary, free_port, wait_until_ready};

const USER: &str = "distlock";
const PASSWORD: &str = "redis-test-secret";

/// A running `redis-server`.
#[derive(Debug)]
pub struct Redis {
    port: u16,
    process: Supervised,
}

impl Redis {
    /// The password in every URL this server hands out.
    pub const PASSWORD: &'static str = PASSWORD;

    /// Starts a new server of its own.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts a replica of `primary`, replicating asynchronously as Redis does.
    pub async fn replica_of(primary: &Redis) -> Self {
        let port = primary.port.to_string();
        Self::start_with(&[
            "--replicaof",
            "127.0.0.1",
            &port,
            "--masteruser",
            USER,
            "--masterauth",
            PASSWORD,
        ])
        .await
    }

    /// Starts a new server with these extra `redis-server` arguments (e.g.
    /// `--maxmemory 1mb`).
    pub async fn start_with(extra: &[&str]) -> Self {
        let server = find_binary("redis-server", &[], "redis-server")
            .to_string_lossy()
            .into_owned();
        let dir = data_dir("root");
        let port = free_port();
        let port_arg = port.to_string();
        let dir_arg = dir.to_string_lossy().into_owned();
        let secret = format!(">{PASSWORD}");
        let mut command = vec![
            server.as_str(),
            "--port",
            &port_arg,
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
            "--user",
            "default",
            "off",
            "--user",
            USER,
            "on",
            &secret,
            "~*",
            "&*",
            "+@all",
        ];
        command.extend_from_slice(extra);
        let redis = Self {
            port,
            process: Supervised::start(&dir, "TERM", &command),
        };
        redis.wait_ready().await;
        redis
    }

    /// One server shared by every test in this test binary.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<Redis> = OnceCell::const_new();
        SHARED.get_or_init(Self::start).await
    }

    /// A URL for this server with the given query string (no leading `?`).
    pub fn url(&self, query: &str) -> String {
        self.url_via(self.port, query)
    }

    /// The same URL, through another port (a proxy's).
    pub fn url_via(&self, port: u16, query: &str) -> String {
        let base = format!(
            "{}://{USER}:{PASSWORD}@127.0.0.1:{port}",
            distlock::lock_redis::SCHEMES[0]
        );
        if query.is_empty() {
            base
        } else {
            format!("{base}?{query}")
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process, to stop, pause or restart it.
    pub fn process(&self) -> &Supervised {
        &self.process
    }

    /// Waits until it answers.
    pub async fn wait_ready(&self) {
        wait_until_ready(
            "redis",
            Duration::from_secs(30),
            || self.process.log(),
            || async { self.cli(&["PING"]).is_some_and(|out| out.trim() == "PONG") },
        )
        .await;
    }

    /// This server's entry in a `redlock://` host list.
    pub fn redlock_host(&self) -> String {
        self.redlock_host_via(self.port)
    }

    /// The same entry, through another port (a proxy's).
    pub fn redlock_host_via(&self, port: u16) -> String {
        format!("{USER}:{PASSWORD}@127.0.0.1:{port}")
    }

    /// Runs `redis-cli` against this server as the test user; `None` if it
    /// failed.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let cli = find_binary("redis-cli", &[], "redis-tools");
        let out = Command::new(cli)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "--user",
                USER,
                "--pass",
                PASSWORD,
            ])
            .arg("--no-auth-warning")
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Independent masters for Redlock: no replication between them.
#[derive(Debug)]
pub struct RedisSet {
    /// The masters.
    pub nodes: Vec<Redis>,
}

impl RedisSet {
    /// Starts `n` independent servers.
    pub async fn start(n: usize) -> Self {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(Redis::start().await);
        }
        Self { nodes }
    }

    /// Five masters shared by every test in this test binary.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<RedisSet> = OnceCell::const_new();
        SHARED.get_or_init(|| Self::start(5)).await
    }

    /// A `redlock://` URL for every node, with the given query string.
    pub fn url(&self, query: &str) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(Redis::redlock_host).collect();
        let base = format!(
            "{}://{}",
            distlock::lock_redlock::SCHEMES[0],
            hosts.join(",")
        );
        if query.is_empty() {
            base
        } else {
            format!("{base}?{query}")
        }
    }
}
