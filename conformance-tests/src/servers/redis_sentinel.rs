//! Redis Sentinel from the `redis-server` and `redis-sentinel` packages: a
//! master and its replica (the single server's configuration, ACL user
//! included) and three sentinels watching them under the name `distlock`,
//! each on a free loopback port; or the sentinels
//! `DISTLOCK_TEST_REDIS_SENTINEL_URL` names.
//!
//! Its URL lists the sentinels, and the master's name is its path:
//!
//! ```text
//! redis+sentinel://distlock:PASSWORD@127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/distlock?OPTIONS
//! ```
//!
//! The user and password, written once before the first sentinel, are the
//! data nodes' (master and replicas): the user a client logs in as once a
//! sentinel has named the master. The sentinels here have no password:
//! they answer anyone on loopback.
//!
//! Each sentinel has its own `sentinel.conf` in its data directory, which it
//! rewrites as it learns the other sentinels, the replica and the master
//! after a failover. A sentinel calls the master down after two seconds
//! without an answer (`down-after-milliseconds 2000`); two must agree
//! (quorum 2), and a majority elects the one that promotes the replica:
//! about three seconds after the master is killed. With `failover-timeout`
//! at ten seconds, an election that fails is tried again twenty seconds
//! later.
//!
//! A write the promoted replica never had:
//! [`RedisSentinel::hold_replication`] routes the replica's link to the
//! master through a [`Proxy`] and stalls it, so what the master writes from
//! then on stays in the proxy while the replica still answers the
//! sentinels; [`RedisSentinel::kill_master`] then makes the sentinels
//! promote it without those writes. A frozen replica (SIGSTOP) cannot
//! stand in: sentinels never promote a replica that does not answer them,
//! and one merely slow would apply the writes waiting in its socket
//! before it is promoted.
//!
//! [`RedisSentinel::start_tls`] starts the same topology over TLS only:
//! data nodes as [`Redis::start_tls`] replicating over TLS, sentinels with
//! `tls-port` (no plain port), `tls-replication` (TLS to the data nodes)
//! and client certificates required, all with the test CA's certificate.

mod conf;

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::backends::REDIS_SENTINEL;
use super::external::external;
use super::ports::start_on_loopback;
use super::redis::{Redis, USER, info_field as field};
use super::tls::TestCa;
use super::url::ServerUrl;
use super::{Supervised, data_dir, find_binary, wait_for, wait_until_ready};
use crate::proxy::{Fault, Proxy};
use conf::{NAME, records, sentinel_conf};

/// Sentinels the harness starts.
const SENTINELS: usize = 3;

/// How long a poll waits for one server: one frozen by SIGSTOP counts as
/// gone.
const POLL_LIMIT: Duration = Duration::from_secs(1);

/// The bound of every wait for the sentinels to settle: a failover takes a
/// few seconds, a failed election twenty more.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// A master, its replica and the sentinels watching them.
#[derive(Debug)]
pub struct RedisSentinel {
    url: ServerUrl,
    /// The master and the replica, in the order started (or listed).
    data: Vec<Redis>,
    sentinels: Vec<Redis>,
    /// The replica's link to the master while it is held.
    proxy: Mutex<Option<Proxy>>,
}

impl RedisSentinel {
    /// Starts a topology of its own: a master, a replica in sync with it,
    /// and three sentinels that know both and each other.
    pub async fn start() -> Self {
        Self::start_as(false).await
    }

    /// The same topology over TLS only: its URL carries the options that
    /// get through (the CA and client certificate of the test CA).
    pub async fn start_tls() -> Self {
        Self::start_as(true).await
    }

    async fn start_as(tls: bool) -> Self {
        let replicate: &[&str] = if tls {
            &["--tls-replication", "yes"]
        } else {
            &[]
        };
        let master = Redis::start_as(tls, replicate).await;
        let replica = Redis::replica_of(&master).await;
        let binary = find_binary("redis-sentinel", &[], "redis-sentinel")
            .to_string_lossy()
            .into_owned();
        let (ports, sentinels) = start_on_loopback("redis-sentinel", SENTINELS, |ports| {
            let sentinels: Vec<Redis> = ports
                .iter()
                .map(|&port| {
                    let dir = data_dir("root");
                    let conf = dir.join("sentinel.conf");
                    std::fs::write(&conf, sentinel_conf(port, &dir, master.port(), tls))
                        .unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
                    let conf = conf.to_string_lossy().into_owned();
                    let process = Supervised::start(&dir, "TERM", &[&binary, &conf]);
                    let sentinel =
                        Redis::at(sentinel_url(&format!("127.0.0.1:{port}")), Some(process));
                    if tls { sentinel.with_tls() } else { sentinel }
                })
                .collect();
            async move {
                for sentinel in &sentinels {
                    sentinel.wait_started(&[]).await?;
                }
                Ok((ports, sentinels))
            }
        })
        .await;
        let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let text = format!(
            "{}://{USER}:{}@{}/{NAME}",
            REDIS_SENTINEL.schemes[0],
            Redis::PASSWORD,
            hosts.join(",")
        );
        let mut url = ServerUrl::parse(&REDIS_SENTINEL, &text)
            .unwrap_or_else(|why| panic!("the harness's own sentinel URL: {why}"));
        if tls {
            url = url.with_query(TestCa::shared().url_options(USER));
        }
        let topology = Self {
            url,
            data: vec![master, replica],
            sentinels,
            proxy: Mutex::new(None),
        };
        topology.wait_ready().await;
        topology
    }

    /// One topology shared by every test in this test binary: the one
    /// `DISTLOCK_TEST_REDIS_SENTINEL_URL` names, if set.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<RedisSentinel> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                match external(&REDIS_SENTINEL, "").await {
                    Some(url) => Self::external(url).await,
                    None => Self::start().await,
                }
            })
            .await
    }

    /// One TLS-only topology shared by every test in this test binary.
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<RedisSentinel> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
    }

    /// The sentinels at `url`, and the data nodes they name.
    async fn external(url: ServerUrl) -> Self {
        let sentinels: Vec<Redis> = url
            .addresses()
            .iter()
            .map(|a| sentinel_url(a))
            .map(|u| Redis::at(u, None))
            .collect();
        let name = url.path().to_owned();
        let mut replicas = None;
        for sentinel in &sentinels {
            replicas = sentinel
                .cli_within(POLL_LIMIT, &["SENTINEL", "REPLICAS", &name])
                .await;
            if replicas.is_some() {
                break;
            }
        }
        let replicas =
            replicas.unwrap_or_else(|| panic!("no sentinel of {} answers", url.redacted()));
        let mut topology = Self {
            url,
            data: Vec::new(),
            sentinels,
            proxy: Mutex::new(None),
        };
        let master = topology
            .named_master()
            .await
            .unwrap_or_else(|| panic!("no sentinel names master {name}"));
        let userinfo = topology
            .url
            .password()
            .map(|password| format!("{}:{password}", topology.url.user().unwrap_or_default()));
        topology.data = std::iter::once(master.to_string())
            .chain(
                records(&replicas)
                    .iter()
                    .filter_map(|r| Some(format!("{}:{}", r.get("ip")?, r.get("port")?))),
            )
            .map(|address| {
                Redis::at(
                    ServerUrl::local(
                        distlock::backends::redis::SCHEMES[0],
                        userinfo.as_deref(),
                        &[address],
                        "",
                    ),
                    None,
                )
            })
            .collect();
        topology
    }

    /// A `redis+sentinel://` URL with the given query string (no leading
    /// `?`).
    pub fn url(&self, query: &str) -> String {
        self.url.url(query)
    }

    /// The name the sentinels know the master by (the URL's path).
    pub fn name(&self) -> &str {
        self.url.path()
    }

    /// The sentinels: `port()`, `cli(…)` (without a password), and
    /// `process()` to stop or freeze one.
    pub fn sentinels(&self) -> &[Redis] {
        &self.sentinels
    }

    /// The master and the replica, whatever their roles now.
    pub fn data_nodes(&self) -> &[Redis] {
        &self.data
    }

    /// The data node the first sentinel that answers names as the master.
    pub async fn master(&self) -> &Redis {
        let addr = self
            .named_master()
            .await
            .unwrap_or_else(|| panic!("no sentinel names the master; the logs:\n{}", self.logs()));
        self.data_node(addr)
    }

    /// The data node that is not the master now. After a failover, that is
    /// the old master, which the sentinels turn into a replica once it is
    /// back.
    pub async fn replica(&self) -> &Redis {
        let master = self.master().await.socket_addr();
        self.data
            .iter()
            .find(|n| n.socket_addr() != master)
            .expect("a data node besides the master")
    }

    /// Kills (SIGKILL) the master the sentinels name and returns it; they
    /// promote the replica ([`RedisSentinel::wait_for_failover`]).
    pub async fn kill_master(&self) -> &Redis {
        let master = self.master().await;
        master.process().kill();
        master
    }

    /// Waits until every sentinel that answers names the same master, not
    /// `old`, and that node answers as a master; returns it. Fails the
    /// test after a minute.
    pub async fn wait_for_failover(&self, old: &Redis) -> &Redis {
        let old = old.socket_addr();
        wait_for(
            &format!("the sentinels to name a master other than {old}"),
            SETTLE_LIMIT,
            || self.logs(),
            move || self.promoted(old),
        )
        .await
    }

    /// Waits until every sentinel knows the master, the replica and the
    /// other sentinels, and the replica is in sync. Fails the test after a
    /// minute.
    pub async fn wait_ready(&self) {
        wait_until_ready(
            "the Redis sentinels",
            SETTLE_LIMIT,
            || self.logs(),
            || self.healthy(),
        )
        .await;
    }

    /// From now on, nothing the master writes reaches the replica and the
    /// replica acknowledges nothing (`WAIT` counts it out), while it still
    /// answers the sentinels, which will promote it if the master dies.
    /// The replica's link to the master goes through a proxy that holds
    /// every byte; it is in sync when the hold begins.
    ///
    /// The hold lasts until [`RedisSentinel::resume_replication`], a
    /// failover, or about ten seconds (`failover-timeout`) after a sentinel
    /// notices that the replica replicates from another address than the
    /// master's: while the master is up, sentinels point such a replica
    /// back at it. Kill the master within a few seconds.
    ///
    /// Only on a topology of the test's own (`start()`): the proxy runs on
    /// the test's runtime.
    pub async fn hold_replication(&self) {
        let master = self.master().await;
        let replica = self.replica().await;
        // Fails, with the reason, on a topology from the variable.
        replica.process();
        let proxy = Proxy::start(master.port()).await;
        let port = proxy.port().to_string();
        let offset = |text: &str| {
            field(text, "master_repl_offset")
                .and_then(|o| o.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let written = offset(&master.cli(&["INFO", "replication"]).unwrap_or_default());
        let answer = replica.cli(&["REPLICAOF", "127.0.0.1", &port]);
        assert_eq!(
            answer.as_deref().map(str::trim),
            Some("OK"),
            "REPLICAOF through the proxy"
        );
        wait_until_ready(
            "the replica, through the proxy",
            SETTLE_LIMIT,
            || self.logs(),
            || async {
                let Some(info) = replica
                    .cli_within(POLL_LIMIT, &["INFO", "replication"])
                    .await
                else {
                    return false;
                };
                field(&info, "master_port") == Some(port.as_str())
                    && field(&info, "master_link_status") == Some("up")
                    && offset(&info) >= written
            },
        )
        .await;
        proxy.set(Fault::Stall);
        *self.proxy.lock().expect("poisoned") = Some(proxy);
    }

    /// Lets what [`RedisSentinel::hold_replication`] held through: the
    /// replica catches up and acknowledges again.
    pub fn resume_replication(&self) {
        if let Some(proxy) = &*self.proxy.lock().expect("poisoned") {
            proxy.set(Fault::None);
        }
    }

    /// The data node at `addr`.
    fn data_node(&self, addr: SocketAddr) -> &Redis {
        self.data
            .iter()
            .find(|n| n.socket_addr() == addr)
            .unwrap_or_else(|| panic!("the sentinels name {addr}, which is none of the data nodes"))
    }

    /// The master's address, as the first sentinel that answers names it.
    async fn named_master(&self) -> Option<SocketAddr> {
        for sentinel in &self.sentinels {
            if let Some(addr) = self.named_by(sentinel).await {
                return Some(addr);
            }
        }
        None
    }

    async fn named_by(&self, sentinel: &Redis) -> Option<SocketAddr> {
        let named = sentinel
            .cli_within(
                POLL_LIMIT,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name()],
            )
            .await?;
        let mut lines = named.lines();
        let (ip, port) = (lines.next()?.trim(), lines.next()?.trim());
        Some(SocketAddr::new(ip.parse().ok()?, port.parse().ok()?))
    }

    /// The master every sentinel that answers names, if it is not `old`
    /// and answers as a master.
    async fn promoted(&self, old: SocketAddr) -> Option<&Redis> {
        let mut named = None;
        for sentinel in &self.sentinels {
            let Some(addr) = self.named_by(sentinel).await else {
                continue;
            };
            if addr == old || named.is_some_and(|n| n != addr) {
                return None;
            }
            named = Some(addr);
        }
        let master = self.data_node(named?);
        let role = master.cli_within(POLL_LIMIT, &["ROLE"]).await?;
        (role.lines().next() == Some("master")).then_some(master)
    }

    async fn healthy(&self) -> bool {
        let others = (self.sentinels.len() - 1).to_string();
        for sentinel in &self.sentinels {
            let Some(text) = sentinel
                .cli_within(POLL_LIMIT, &["SENTINEL", "MASTER", self.name()])
                .await
            else {
                return false;
            };
            let Some(master) = records(&text).into_iter().next() else {
                return false;
            };
            if master.get("flags").map(String::as_str) != Some("master")
                || master.get("num-other-sentinels") != Some(&others)
                || master.get("num-slaves").is_none_or(|n| n == "0")
            {
                return false;
            }
        }
        for node in &self.data {
            let Some(info) = node.cli_within(POLL_LIMIT, &["INFO", "replication"]).await else {
                return false;
            };
            if field(&info, "role") == Some("slave")
                && field(&info, "master_link_status") != Some("up")
            {
                return false;
            }
        }
        true
    }

    /// Every server's log, for failure messages.
    fn logs(&self) -> String {
        self.data
            .iter()
            .chain(&self.sentinels)
            .map(|n| format!("--- {} ---\n{}", n.socket_addr(), n.log()))
            .collect()
    }
}

/// A sentinel's URL: no password.
fn sentinel_url(address: &str) -> ServerUrl {
    ServerUrl::local(
        distlock::backends::redis::SCHEMES[0],
        None,
        &[address.to_owned()],
        "",
    )
}
