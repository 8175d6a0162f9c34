//! memcached from the `memcached` package, on a free loopback port; or the
//! one `DISTLOCK_TEST_MEMCACHE_URL` names.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::OnceCell;

use super::backends::MEMCACHE;
use super::external::external;
use super::ports::{start_on_loopback, wait_started};
use super::tls::TestCa;
use super::url::{ServerUrl, join_query};
use super::{Supervised, data_dir, find_binary, log_of, started, wait_until_ready};

/// A running memcached.
#[derive(Debug)]
pub struct Memcached {
    url: ServerUrl,
    /// The TLS options every URL of a TLS-only server carries, or nothing.
    tls_query: String,
    process: Option<Supervised>,
}

impl Memcached {
    /// Starts a server with 64 MB of memory.
    pub async fn start() -> Self {
        Self::start_with_memory(64).await
    }

    /// Starts a server with `megabytes` of item memory (small values make it
    /// evict).
    pub async fn start_with_memory(megabytes: u32) -> Self {
        Self::start_with(megabytes, false).await
    }

    /// Starts a server that takes TLS only, with the certificate of
    /// [`TestCa::shared`] and client certificates required (signed by that
    /// CA): [`url`](Self::url) carries the options that get through.
    pub async fn start_tls() -> Self {
        Self::start_with(64, true).await
    }

    async fn start_with(megabytes: u32, tls: bool) -> Self {
        let memcached = find_binary("memcached", &["/usr/bin"], "memcached")
            .to_string_lossy()
            .into_owned();
        let memcached = memcached.as_str();
        let pki = TestCa::shared();
        // Verify mode 2: a client without a certificate is refused.
        let tls_options = format!(
            "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode=2",
            pki.server.cert.display(),
            pki.server.key.display(),
            pki.ca.display()
        );
        let tls_options = tls_options.as_str();
        start_on_loopback("memcached", 1, |ports| async move {
            let dir = data_dir("root");
            let port = ports[0];
            let (port_arg, memory) = (port.to_string(), megabytes.to_string());
            let mut command = vec![
                memcached,
                "-l",
                "127.0.0.1",
                "-p",
                &port_arg,
                "-U",
                "0",
                "-m",
                &memory,
            ];
            if tls {
                command.extend(["-Z", "-o", tls_options]);
            }
            if nix::unistd::geteuid().is_root() {
                // memcached will not run as root without being told whom to be.
                command.extend(["-u", "memcache"]);
            }
            let query = if tls {
                pki.url_options("distlock")
            } else {
                String::new()
            };
            let server = Self {
                url: ServerUrl::local(
                    distlock::backends::memcache::SCHEMES[0],
                    None,
                    &[format!("127.0.0.1:{port}")],
                    "",
                ),
                tls_query: query,
                process: Some(Supervised::start(&dir, "TERM", &command)),
            };
            let addr = server.addr();
            wait_started(
                "memcached",
                Duration::from_secs(30),
                &[(server.process(), vec![port])],
                || async { TcpStream::connect(&addr).await.is_ok() },
            )
            .await?;
            Ok(server)
        })
        .await
    }

    /// Waits until it accepts connections (after a start or restart).
    pub async fn wait_ready(&self) {
        let addr = self.addr();
        wait_until_ready(
            "memcached",
            Duration::from_secs(30),
            || log_of(&self.process),
            || async { TcpStream::connect(&addr).await.is_ok() },
        )
        .await;
    }

    /// One server shared by every test in this test binary: the one
    /// `DISTLOCK_TEST_MEMCACHE_URL` names, if set.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<Memcached> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                match external(&MEMCACHE, "").await {
                    Some(url) => Self {
                        url,
                        tls_query: String::new(),
                        process: None,
                    },
                    None => Self::start().await,
                }
            })
            .await
    }

    /// One TLS-only server shared by every test in this test binary.
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<Memcached> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        self.url.addresses().swap_remove(0)
    }

    /// Its address, resolved (for a proxy in front of it).
    pub fn socket_addr(&self) -> SocketAddr {
        self.url.socket_addr()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url.port()
    }

    /// A `memcache://` URL with the given query string (and the TLS
    /// options, for a TLS-only server).
    pub fn url(&self, query: &str) -> String {
        self.url.url(&join_query(&self.tls_query, query))
    }

    /// The same URL, through another port (a proxy's).
    pub fn url_via(&self, port: u16, query: &str) -> String {
        self.url.url_via(port, &join_query(&self.tls_query, query))
    }

    /// The process, to stop or restart it.
    pub fn process(&self) -> &Supervised {
        started(&self.process, &self.url.redacted())
    }

    /// Stores `count` filler items of `size` bytes (classic `set`, no reply
    /// awaited per item), to push the server into evicting.
    pub async fn fill(&self, count: usize, size: usize) {
        let mut conn = BufReader::new(
            TcpStream::connect(self.addr())
                .await
                .expect("connect to memcached"),
        );
        let value = "x".repeat(size);
        for i in 0..count {
            let cmd = format!("set filler-{i} 0 0 {size} noreply\r\n{value}\r\n");
            conn.get_mut()
                .write_all(cmd.as_bytes())
                .await
                .expect("write filler");
        }
        conn.get_mut().write_all(b"mn\r\n").await.expect("write mn");
        let mut line = String::new();
        conn.read_line(&mut line).await.expect("read MN");
    }
}
