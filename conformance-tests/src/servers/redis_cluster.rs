//! Redis Cluster from the `redis-server` package: six nodes with
//! `--cluster-enabled yes` on free loopback ports, made into three masters
//! with one replica each by `redis-cli --cluster create`; or the cluster
//! `DISTLOCK_TEST_REDIS_CLUSTER_URL` names.
//!
//! Its URL lists every node, masters and replicas, so that a client finds
//! the cluster while any one of them is down:
//!
//! ```text
//! redis+cluster://distlock:PASSWORD@127.0.0.1:P1,127.0.0.1:P2,…,127.0.0.1:P6?OPTIONS
//! ```
//!
//! The credentials come once, before the first node, and hold for every
//! node: each has the single server's ACL user (the default user off).
//! There is no path, since a cluster has database 0 only.
//!
//! Each node is configured like the single server (no persistence) and
//! also:
//! - `cluster-node-timeout 2000`: a node silent for two seconds is failed
//!   over. A killed master's replica serves its slots about three seconds
//!   later.
//! - `cluster-replica-validity-factor 0`: a replica takes over however
//!   long it was cut off from its master. The tests kill masters on
//!   purpose, and a replica that refused would only stall them.
//! - `repl-ping-replica-period 1`: a replica that has had nothing to
//!   replicate has offset 0, and the cluster leaves it out of
//!   `CLUSTER SLOTS` (`CLUSTER SHARDS` says "loading") until its master's
//!   first ping, ten seconds after it attached by default.
//! - `cluster-port`: the cluster bus has a port of its own, picked free
//!   like the client port (by default it is the client port + 10000, which
//!   may be taken or above 65535).
//! - `nodes.conf` in the node's own data directory, so a node killed and
//!   restarted (`process().restart()`) rejoins the cluster, as a replica
//!   of the master that took its slots.
//!
//! [`RedisCluster::start_tls`] starts the same cluster over TLS only: each
//! node as [`Redis::start_tls`], with `tls-cluster` (the bus) and
//! `tls-replication` on.

mod listing;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::backends::REDIS_CLUSTER;
use super::external::external;
use super::ports::start_on_loopback;
use super::redis::{Redis, USER, info_field as field, tls_cli_args};
use super::tls::TestCa;
use super::url::ServerUrl;
use super::{find_binary, wait_for, wait_until_ready};
use listing::{ListedNode, crc16, hash_tag, healths, parse_nodes};

/// The number of hash slots.
pub const SLOTS: u16 = 16384;

/// Nodes the harness starts: three masters with a replica each.
const NODES: usize = 6;

/// How long a node may be silent before the others fail it over (ms).
const NODE_TIMEOUT_MS: &str = "2000";

/// How long a poll waits for one node: one frozen by SIGSTOP counts as
/// gone.
const POLL_LIMIT: Duration = Duration::from_secs(1);

/// The bound of every wait for the cluster to settle. A failover takes a
/// few seconds; this leaves room for a loaded machine.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// A running Redis Cluster.
#[derive(Debug)]
pub struct RedisCluster {
    url: ServerUrl,
    nodes: Vec<Redis>,
}

impl RedisCluster {
    /// Starts a new cluster of its own: three masters covering every slot,
    /// each with one replica in sync.
    pub async fn start() -> Self {
        Self::start_as(false).await
    }

    /// The same cluster, over TLS only: its URL carries the options that
    /// get through (the CA and client certificate of the test CA).
    pub async fn start_tls() -> Self {
        Self::start_as(true).await
    }

    async fn start_as(tls: bool) -> Self {
        let tls_args: &[&str] = if tls {
            &["--tls-cluster", "yes", "--tls-replication", "yes"]
        } else {
            &[]
        };
        let (clients, nodes) = start_on_loopback("redis cluster", 2 * NODES, |ports| async move {
            let (clients, buses) = ports.split_at(NODES);
            let nodes: Vec<Redis> = clients
                .iter()
                .zip(buses)
                .map(|(port, bus)| {
                    let bus = bus.to_string();
                    Redis::spawn_as(
                        tls,
                        *port,
                        &[
                            &[
                                "--cluster-enabled",
                                "yes",
                                "--cluster-port",
                                &bus,
                                // Relative to the node's data directory.
                                "--cluster-config-file",
                                "nodes.conf",
                                "--cluster-node-timeout",
                                NODE_TIMEOUT_MS,
                                "--cluster-replica-validity-factor",
                                "0",
                                // The replicas' offsets move, and the cluster hears
                                // of them, within a second rather than ten.
                                "--repl-ping-replica-period",
                                "1",
                                "--masteruser",
                                USER,
                                "--masterauth",
                                Redis::PASSWORD,
                            ][..],
                            tls_args,
                        ]
                        .concat(),
                    )
                })
                .collect();
            for (node, bus) in nodes.iter().zip(buses) {
                node.wait_started(&[*bus]).await?;
            }
            Ok((clients.to_vec(), nodes))
        })
        .await;
        create(&nodes).await;
        let hosts: Vec<String> = clients.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let text = format!(
            "{}://{USER}:{}@{}",
            REDIS_CLUSTER.schemes[0],
            Redis::PASSWORD,
            hosts.join(",")
        );
        let mut url = ServerUrl::parse(&REDIS_CLUSTER, &text)
            .unwrap_or_else(|why| panic!("the harness's own cluster URL: {why}"));
        if tls {
            url = url.with_query(TestCa::shared().url_options(USER));
        }
        let cluster = Self { url, nodes };
        cluster.wait_ready().await;
        cluster
    }

    /// One cluster shared by every test in this test binary: the one
    /// `DISTLOCK_TEST_REDIS_CLUSTER_URL` names, if set.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<RedisCluster> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                match external(&REDIS_CLUSTER, "").await {
                    Some(url) => Self::external(url).await,
                    None => Self::start().await,
                }
            })
            .await
    }

    /// The cluster at `url`, with the nodes it lists (the URL may name only
    /// some).
    async fn external(url: ServerUrl) -> Self {
        let seeds: Vec<Redis> = url
            .addresses()
            .iter()
            .map(|address| node_at(&url, address))
            .collect();
        let mut listed = None;
        for seed in &seeds {
            listed = seed.cli_within(POLL_LIMIT, &["CLUSTER", "NODES"]).await;
            if listed.is_some() {
                break;
            }
        }
        let listed =
            listed.unwrap_or_else(|| panic!("no node of {} answers CLUSTER NODES", url.redacted()));
        let nodes = parse_nodes(&listed)
            .iter()
            .map(|n| node_at(&url, &n.addr.to_string()))
            .collect();
        Self { url, nodes }
    }

    /// A `redis+cluster://` URL with the given query string (no leading
    /// `?`).
    pub fn url(&self, query: &str) -> String {
        self.url.url(query)
    }

    /// One TLS-only cluster shared by every test in this test binary.
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<RedisCluster> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
    }

    /// Every node, in the order they were started (or listed), whatever
    /// their role now. `url("")` of one is a plain `redis://` URL of that
    /// node; `process()` kills, freezes or restarts it.
    pub fn nodes(&self) -> &[Redis] {
        &self.nodes
    }

    /// The masters serving slots now, as a live node sees the cluster,
    /// in slot order. Right after a master is killed, it is still one of
    /// them until the cluster fails it over.
    pub async fn masters(&self) -> Vec<&Redis> {
        let mut masters: Vec<ListedNode> = self
            .listing()
            .await
            .into_iter()
            .filter(|n| n.is_master() && !n.slots.is_empty())
            .collect();
        masters.sort_by_key(|n| *n.slots[0].start());
        masters.iter().map(|n| self.node(n.addr)).collect()
    }

    /// The replicas now, as a live node sees the cluster.
    pub async fn replicas(&self) -> Vec<&Redis> {
        self.listing()
            .await
            .iter()
            .filter(|n| n.master_id.is_some())
            .map(|n| self.node(n.addr))
            .collect()
    }

    /// The replicas of `master` now, as a live node sees the cluster.
    pub async fn replicas_of(&self, master: &Redis) -> Vec<&Redis> {
        let listing = self.listing().await;
        let id = &listing
            .iter()
            .find(|n| n.addr == master.socket_addr())
            .unwrap_or_else(|| panic!("{} is not in the cluster", master.socket_addr()))
            .id;
        listing
            .iter()
            .filter(|n| n.master_id.as_ref() == Some(id))
            .map(|n| self.node(n.addr))
            .collect()
    }

    /// The master that serves `slot` now, as a live node sees the cluster.
    pub async fn master_of_slot(&self, slot: u16) -> &Redis {
        let listing = self.listing().await;
        let owner = listing
            .iter()
            .find(|n| n.is_master() && n.serves(slot))
            .unwrap_or_else(|| panic!("no master serves slot {slot}"));
        self.node(owner.addr)
    }

    /// Kills (SIGKILL) the master serving `slot` and returns it; its
    /// replica takes over ([`RedisCluster::wait_for_failover`]).
    pub async fn kill_master_of_slot(&self, slot: u16) -> &Redis {
        let master = self.master_of_slot(slot).await;
        master.process().kill();
        master
    }

    /// Waits until a master that answers serves `slot` and every node that
    /// answers agrees on it and reports `cluster_state:ok`; returns that
    /// master. After a master was killed or frozen, this is its replica,
    /// promoted. Fails the test after a minute.
    pub async fn wait_for_failover(&self, slot: u16) -> &Redis {
        wait_for(
            &format!("a live master for slot {slot}"),
            SETTLE_LIMIT,
            || self.logs(),
            move || self.serving(slot),
        )
        .await
    }

    /// Waits until every node answers, reports `cluster_state:ok` with
    /// every slot served, knows every other node's role (a master with
    /// slots or a replica), and every replica is in sync with its master: after `start()`, or after a killed node
    /// was restarted. Fails the test after a minute.
    pub async fn wait_ready(&self) {
        wait_until_ready(
            "the Redis cluster",
            SETTLE_LIMIT,
            || self.logs(),
            || self.healthy(),
        )
        .await;
    }

    /// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash
    /// tag (the text between the first `{` and the next `}`, if not
    /// empty), modulo 16384, as `CLUSTER KEYSLOT` computes it.
    pub fn slot_of(key: impl AsRef<[u8]>) -> u16 {
        crc16(hash_tag(key.as_ref())) % SLOTS
    }

    /// The node at `addr`.
    fn node(&self, addr: SocketAddr) -> &Redis {
        self.nodes
            .iter()
            .find(|n| n.socket_addr() == addr)
            .unwrap_or_else(|| panic!("the cluster lists {addr}, which is none of its nodes"))
    }

    /// The cluster as the first node that answers lists it.
    async fn listing(&self) -> Vec<ListedNode> {
        for node in &self.nodes {
            if let Some(listed) = node.cli_within(POLL_LIMIT, &["CLUSTER", "NODES"]).await {
                return parse_nodes(&listed);
            }
        }
        panic!(
            "no node of the cluster {} answers; the logs:\n{}",
            self.url.redacted(),
            self.logs()
        )
    }

    /// The master serving `slot`, if every node that answers agrees on it
    /// and is content, and it answers as a master itself.
    async fn serving(&self, slot: u16) -> Option<&Redis> {
        let mut owner = None;
        for node in &self.nodes {
            // A node killed or frozen has no say.
            let Some(info) = node.cli_within(POLL_LIMIT, &["CLUSTER", "INFO"]).await else {
                continue;
            };
            if field(&info, "cluster_state") != Some("ok") {
                return None;
            }
            let listed = node.cli_within(POLL_LIMIT, &["CLUSTER", "NODES"]).await?;
            let theirs = parse_nodes(&listed)
                .into_iter()
                .find(|n| n.is_master() && n.serves(slot))?
                .addr;
            if owner.is_some_and(|o| o != theirs) {
                return None;
            }
            owner = Some(theirs);
        }
        let master = self.node(owner?);
        let role = master.cli_within(POLL_LIMIT, &["ROLE"]).await?;
        (role.lines().next() == Some("master")).then_some(master)
    }

    async fn healthy(&self) -> bool {
        let slots = SLOTS.to_string();
        let known = self.nodes.len().to_string();
        for node in &self.nodes {
            let Some(info) = node.cli_within(POLL_LIMIT, &["CLUSTER", "INFO"]).await else {
                return false;
            };
            if field(&info, "cluster_state") != Some("ok")
                || field(&info, "cluster_slots_ok") != Some(&slots)
                || field(&info, "cluster_known_nodes") != Some(&known)
            {
                return false;
            }
            // Each node learns the others' roles by gossip: until then it
            // lists a replica as a master without slots.
            let Some(listed) = node.cli_within(POLL_LIMIT, &["CLUSTER", "NODES"]).await else {
                return false;
            };
            let listed = parse_nodes(&listed);
            if listed.len() != self.nodes.len() || !listed.iter().all(ListedNode::settled) {
                return false;
            }
            // A replica whose replication offset the others have not heard
            // of yet is "loading", and left out of `CLUSTER SLOTS`.
            let Some(shards) = node.cli_within(POLL_LIMIT, &["CLUSTER", "SHARDS"]).await else {
                return false;
            };
            if healths(&shards) != vec!["online"; self.nodes.len()] {
                return false;
            }
            let Some(replication) = node.cli_within(POLL_LIMIT, &["INFO", "replication"]).await
            else {
                return false;
            };
            if field(&replication, "role") == Some("slave")
                && field(&replication, "master_link_status") != Some("up")
            {
                return false;
            }
        }
        true
    }

    /// Every node's log, for failure messages.
    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- {} ---\n{}", n.socket_addr(), n.log()))
            .collect()
    }
}

/// Makes the nodes one cluster: the first three masters, the others their
/// replicas.
async fn create(nodes: &[Redis]) {
    let cli = find_binary("redis-cli", &[], "redis-tools");
    let mut command = tokio::process::Command::new(cli);
    if nodes.first().is_some_and(Redis::is_tls) {
        command.args(tls_cli_args());
    }
    command
        .args(["--user", USER, "--cluster", "create"])
        .args(nodes.iter().map(|n| n.socket_addr().to_string()))
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        // Not on the command line, which a failure message would show.
        .env("REDISCLI_AUTH", Redis::PASSWORD)
        .kill_on_drop(true);
    let out = tokio::time::timeout(SETTLE_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("redis-cli --cluster create still runs after {SETTLE_LIMIT:?}"))
        .unwrap_or_else(|e| panic!("cannot run redis-cli --cluster create: {e}"));
    assert!(
        out.status.success(),
        "redis-cli --cluster create failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A node of a cluster the harness did not start, with the URL's
/// credentials.
fn node_at(url: &ServerUrl, address: &str) -> Redis {
    let userinfo = url
        .password()
        .map(|password| format!("{}:{password}", url.user().unwrap_or_default()));
    Redis::at(
        ServerUrl::local(
            distlock::backends::redis::SCHEMES[0],
            userinfo.as_deref(),
            &[address.to_owned()],
            "",
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_rules() {
        // Values from Redis's cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(RedisCluster::slot_of("foo"), 12182);
        assert_eq!(
            RedisCluster::slot_of("{user1000}.following"),
            RedisCluster::slot_of("user1000")
        );
        assert_eq!(
            RedisCluster::slot_of("foo{}{bar}"),
            crc16(b"foo{}{bar}") % SLOTS
        );
        assert_eq!(
            RedisCluster::slot_of("foo{{bar}}zap"),
            RedisCluster::slot_of("{bar")
        );
        assert_eq!(RedisCluster::slot_of("foo{bar"), crc16(b"foo{bar") % SLOTS);
    }
}
