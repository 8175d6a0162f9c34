//! ZooKeeper 3.8 from the `zookeeper` package: one standalone server, or a
//! three-server ensemble on 127.0.0.1, 127.0.0.2 and 127.0.0.3, with data in
//! temporary directories. An ensemble can have a fault proxy on every link
//! between two servers, to cut one server off from its peers while its
//! clients still reach it. Or the server or ensemble `DISTLOCK_TEST_ZK_URL`
//! names, configured as below (docker-compose.yml's is).
//!
//! The servers tick every 200 ms (sessions from 400 ms to 60 s, elections
//! in a second or two) and look for empty container nodes every 500 ms, so
//! the session-expiry and cleanup tests run in seconds. A follower gives up
//! on a silent leader after 10 ticks, or 50 where peer links are proxied.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::OnceCell;

use super::backends::ZK;
use super::external::{configured, external};
use super::ports::{Listener, PortTaken, start_on_free_ports, wait_started};
use super::tls::TestCa;
use super::url::{ServerUrl, join_query, resolve};
use super::{Supervised, data_dir, find_binary, log_of, started, wait_until_ready};
use crate::proxy::{Fault, Proxy};

/// Milliseconds per ZooKeeper tick on the test servers.
pub const TICK_MS: u64 = 200;

/// One ZooKeeper server.
#[derive(Debug)]
pub struct ZkServer {
    /// `myid`, from 1.
    pub id: u32,
    /// `host:port` clients connect to.
    pub client_addr: String,
    process: Option<Supervised>,
}

impl ZkServer {
    /// The process, to stop, kill, pause or restart it.
    pub fn process(&self) -> &Supervised {
        started(&self.process, &self.client_addr)
    }

    /// Its client address, resolved (for a proxy in front of it).
    pub fn socket_addr(&self) -> SocketAddr {
        resolve(&self.client_addr)
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.client_addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("host:port")
    }

    /// The answer to the `srvr` four-letter command, if the server answers.
    pub fn srvr(&self) -> Option<String> {
        four_letter(&self.client_addr, "srvr")
    }

    /// `standalone`, `leader` or `follower` while the server serves.
    pub fn mode(&self) -> Option<String> {
        let srvr = self.srvr()?;
        srvr.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_owned())
    }
}

/// Sends a four-letter command and reads the whole answer.
fn four_letter(addr: &str, command: &str) -> Option<String> {
    let addr = addr.parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(command.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// A running standalone server or ensemble.
#[derive(Debug)]
pub struct ZooKeeper {
    /// The servers.
    pub servers: Vec<ZkServer>,
    /// The proxies between servers, if the ensemble has them.
    peer_links: Vec<PeerLink>,
    url: ServerUrl,
    /// The TLS options every URL of a TLS-only server carries, or nothing.
    tls_query: String,
}

/// The proxy through which server `from` reaches the quorum port of server
/// `to` (the port a follower connects to when `to` leads).
#[derive(Debug)]
struct PeerLink {
    from: u32,
    to: u32,
    proxy: Proxy,
}

impl ZooKeeper {
    /// Starts one standalone server on 127.0.0.1.
    pub async fn start() -> Self {
        Self::start_on(&["127.0.0.1"], false, false).await
    }

    /// Starts one standalone server on 127.0.0.1 that takes TLS only (a
    /// `secureClientPort` through Netty, no plain port), with the
    /// certificate of [`TestCa::shared`] and client certificates required:
    /// [`url`](Self::url) carries the options that get through.
    pub async fn start_tls() -> Self {
        Self::start_on(&["127.0.0.1"], false, true).await
    }

    /// One TLS-only server shared by every test in this test binary.
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<ZooKeeper> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
    }

    /// Starts a three-server ensemble on 127.0.0.1, .2 and .3.
    pub async fn start_ensemble() -> Self {
        Self::start_on(&["127.0.0.1", "127.0.0.2", "127.0.0.3"], false, false).await
    }

    /// Starts a three-server ensemble in which every server reaches each
    /// other server's quorum port through a proxy of its own, so that
    /// [`ZooKeeper::set_peer_fault`] can cut one server off from the others.
    pub async fn start_ensemble_with_peer_proxies() -> Self {
        Self::start_on(&["127.0.0.1", "127.0.0.2", "127.0.0.3"], true, false).await
    }

    /// Sets `fault` on every link between server `id` and its peers; its
    /// clients still reach it. On a link, the connecting side is the
    /// proxy's client: a follower, connecting to its leader, so
    /// [`Fault::StallRequests`] on a follower holds what it tells the
    /// leader and lets through what the leader tells it. Only for an
    /// ensemble started with [`ZooKeeper::start_ensemble_with_peer_proxies`].
    pub fn set_peer_fault(&self, id: u32, fault: Fault) {
        assert!(
            !self.peer_links.is_empty(),
            "this ensemble has no proxies between its servers"
        );
        for link in &self.peer_links {
            if link.from == id || link.to == id {
                link.proxy.set(fault);
            }
        }
    }

    async fn start_on(hosts: &[&str], proxied: bool, tls: bool) -> Self {
        let java = find_binary("java", &[], "zookeeper")
            .to_string_lossy()
            .into_owned();
        let jar = find_binary("zookeeper.jar", &["/usr/share/java"], "zookeeper");
        // A logger for the server's log, if the package that has it is there.
        let mut classpath = jar.to_string_lossy().into_owned();
        let simple = Path::new("/usr/share/java/slf4j-simple.jar");
        if simple.is_file() {
            classpath = format!("{classpath}:{}", simple.display());
        }
        if tls {
            // Netty's TLS handler needs its codecs, which the package's
            // class path leaves out.
            let codec = find_binary("netty-codec.jar", &["/usr/share/java"], "libnetty-java");
            classpath = format!("{classpath}:{}", codec.display());
        }
        let (java, classpath) = (java.as_str(), classpath.as_str());
        // A client, a quorum and an election port on each server's address.
        let addrs: Vec<IpAddr> = hosts
            .iter()
            .flat_map(|h| [h.parse().expect("a loopback address"); 3])
            .collect();
        start_on_free_ports("zookeeper", &addrs, |ports| async move {
            let peers: Vec<(String, u16, u16, u16)> = hosts
                .iter()
                .zip(ports.chunks(3))
                .map(|(h, p)| ((*h).to_owned(), p[0], p[1], p[2]))
                .collect();
            // A server cut off from the leader notices after syncLimit ticks;
            // where links can be cut, that is long enough to watch what it
            // does in between.
            let sync_limit = if proxied { 50 } else { 10 };
            let ids = || (1..).take(peers.len());
            // Each server's own list of the ensemble: its peers' quorum ports
            // are proxies where the links are proxied. A proxy listens on the
            // peer's address, which the peer's election port shares.
            let mut peer_links = Vec::new();
            let mut ensembles = Vec::new();
            for from in ids() {
                let mut ensemble = Vec::new();
                for ((host, _, quorum, election), to) in peers.iter().zip(ids()) {
                    let ip: IpAddr = host.parse().expect("a loopback address");
                    let quorum = if proxied && from != to {
                        let proxy = Proxy::between(ip, SocketAddr::new(ip, *quorum)).await;
                        let port = proxy.port();
                        peer_links.push(PeerLink { from, to, proxy });
                        port
                    } else {
                        *quorum
                    };
                    ensemble.push(format!("server.{to}={host}:{quorum}:{election}"));
                }
                ensembles.push(ensemble);
            }
            let servers = peers
                .iter()
                .zip(ids())
                .zip(&ensembles)
                .map(|(((host, client, _, _), id), ensemble)| {
                    let dir = data_dir("root");
                    let config = write_config(&dir, id, host, *client, ensemble, sync_limit, tls);
                    let args = [
                        java.to_owned(),
                        "-Xmx256m".into(),
                        "-XX:+UseSerialGC".into(),
                        "-XX:TieredStopAtLevel=1".into(),
                        "-Dznode.container.checkIntervalMs=500".into(),
                        "-Dzookeeper.admin.enableServer=false".into(),
                        "-cp".into(),
                        classpath.to_owned(),
                        "org.apache.zookeeper.server.quorum.QuorumPeerMain".into(),
                        config.to_string_lossy().into_owned(),
                    ];
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    ZkServer {
                        id,
                        client_addr: format!("{host}:{client}"),
                        process: Some(Supervised::start(&dir, "TERM", &args)),
                    }
                })
                .collect::<Vec<_>>();
            let addrs: Vec<String> = servers.iter().map(|s| s.client_addr.clone()).collect();
            let zk = Self {
                servers,
                peer_links,
                url: ServerUrl::local(distlock::backends::zk::SCHEMES[0], None, &addrs, ""),
                tls_query: match tls {
                    true => TestCa::shared().url_options("distlock"),
                    false => String::new(),
                },
            };
            zk.wait_started(&ports).await?;
            Ok(zk)
        })
        .await
    }

    /// A standalone server shared by every test in this test binary: the
    /// one `DISTLOCK_TEST_ZK_URL` names, if set.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<ZooKeeper> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                match external(&ZK, "").await {
                    Some(url) => Self {
                        servers: (1..)
                            .zip(url.addresses())
                            .map(|(id, client_addr)| ZkServer {
                                id,
                                client_addr,
                                process: None,
                            })
                            .collect(),
                        peer_links: Vec::new(),
                        url,
                        tls_query: String::new(),
                    },
                    None => Self::start().await,
                }
            })
            .await
    }

    /// A three-server ensemble shared by every test in this test binary
    /// that leaves it whole; the server `DISTLOCK_TEST_ZK_URL` names stands
    /// in for it, if set.
    pub async fn shared_ensemble() -> &'static Self {
        if configured(&ZK).is_some() {
            return Self::shared().await;
        }
        static SHARED: OnceCell<ZooKeeper> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_ensemble).await
    }

    /// Every server's client address, comma-separated.
    pub fn connect_string(&self) -> String {
        let addrs: Vec<&str> = self
            .servers
            .iter()
            .map(|s| s.client_addr.as_str())
            .collect();
        addrs.join(",")
    }

    /// A `zk://` URL for the ensemble with a chroot (without its leading
    /// `/`) and a query string.
    pub fn url(&self, chroot: &str, query: &str) -> String {
        self.url.url_at(chroot, &join_query(&self.tls_query, query))
    }

    /// Waits until every server of an ensemble just started on `ports` (a
    /// client, a quorum and an election port per server) serves;
    /// [`PortTaken`] if one could not listen. Only the leader listens on
    /// its quorum port, and only once elected: the others are checked.
    async fn wait_started(&self, ports: &[u16]) -> Result<(), PortTaken> {
        let listeners: Vec<Listener<'_>> = self
            .servers
            .iter()
            .zip(ports.chunks(3))
            .map(|(s, p)| {
                let election = (self.servers.len() > 1).then_some(p[2]);
                (
                    s.process(),
                    [Some(p[0]), election].into_iter().flatten().collect(),
                )
            })
            .collect();
        wait_started("zookeeper", Duration::from_secs(60), &listeners, || async {
            if self.tls_query.is_empty() {
                return self.servers.iter().all(|s| s.mode().is_some());
            }
            // Four-letter words need a plain port: a session is the proof.
            let url = self.url("", "connect_timeout=2s");
            distlock::backends::zk::ZkBackend::connect(&url)
                .await
                .is_ok()
        })
        .await
    }

    /// Waits until every server serves: standalone, or leader and followers.
    pub async fn wait_ready(&self) {
        wait_until_ready(
            "zookeeper",
            Duration::from_secs(60),
            || self.logs(),
            || async { self.servers.iter().all(|s| s.mode().is_some()) },
        )
        .await;
    }

    /// Waits until the servers that are running have a leader, or serve
    /// standalone.
    pub async fn wait_serving(&self, servers: &[&ZkServer]) {
        wait_until_ready(
            "zookeeper quorum",
            Duration::from_secs(60),
            || self.logs(),
            || async { servers.iter().all(|s| s.mode().is_some()) },
        )
        .await;
    }

    /// The server that leads now, if one does.
    pub fn leader(&self) -> Option<&ZkServer> {
        self.servers
            .iter()
            .find(|s| s.mode().as_deref() == Some("leader"))
    }

    /// Every server's log, for failure messages.
    pub fn logs(&self) -> String {
        self.servers
            .iter()
            .map(|s| log_of(&s.process))
            .collect::<Vec<_>>()
            .join("\n---\n")
    }
}

/// Writes `zoo.cfg` (and `myid` for an ensemble) into `dir`.
fn write_config(
    dir: &Path,
    id: u32,
    host: &str,
    client_port: u16,
    ensemble: &[String],
    sync_limit: u32,
    tls: bool,
) -> PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("create the data directory");
    let mut config = format!(
        "tickTime={TICK_MS}\n\
         initLimit=20\n\
         syncLimit={sync_limit}\n\
         dataDir={}\n\
         minSessionTimeout={}\n\
         maxSessionTimeout=60000\n\
         maxClientCnxns=0\n\
         4lw.commands.whitelist=srvr\n\
         admin.enableServer=false\n",
        data.display(),
        2 * TICK_MS,
    );
    if tls {
        let pki = TestCa::shared();
        // A PEM key store holds the key and the certificate in one file.
        let read = |path: &Path| std::fs::read_to_string(path).expect("read a PEM file");
        let key_store = dir.join("server-keystore.pem");
        let pem = read(&pki.server.key) + &read(&pki.server.cert);
        std::fs::write(&key_store, pem).expect("write the key store");
        config.push_str(&format!(
            "secureClientPort={client_port}\n\
             secureClientPortAddress={host}\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={}\n\
             ssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\n\
             ssl.trustStore.type=PEM\n\
             ssl.clientAuth=need\n",
            key_store.display(),
            pki.ca.display()
        ));
    } else {
        config.push_str(&format!(
            "clientPort={client_port}\nclientPortAddress={host}\n"
        ));
    }
    if ensemble.len() > 1 {
        std::fs::write(data.join("myid"), format!("{id}\n")).expect("write myid");
        for line in ensemble {
            config.push_str(line);
            config.push('\n');
        }
    }
    let path = dir.join("zoo.cfg");
    std::fs::write(&path, config).expect("write zoo.cfg");
    path
}
