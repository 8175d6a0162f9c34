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

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::external::{REDIS_CLUSTER, external};
use super::ports::start_on_loopback;
use super::redis::{Redis, USER, info_field as field};
use super::url::ServerUrl;
use super::{find_binary, wait_for, wait_until_ready};

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
        let (clients, nodes) = start_on_loopback("redis cluster", 2 * NODES, |ports| async move {
            let (clients, buses) = ports.split_at(NODES);
            let nodes: Vec<Redis> = clients
                .iter()
                .zip(buses)
                .map(|(port, bus)| {
                    let bus = bus.to_string();
                    Redis::spawn_on(
                        *port,
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
                        ],
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
        let url = ServerUrl::parse(&REDIS_CLUSTER, &text)
            .unwrap_or_else(|why| panic!("the harness's own cluster URL: {why}"));
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
            distlock::lock_redis::SCHEMES[0],
            userinfo.as_deref(),
            &[address.to_owned()],
            "",
        ),
        None,
    )
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, PartialEq, Eq)]
struct ListedNode {
    id: String,
    addr: SocketAddr,
    flags: Vec<String>,
    /// Its master's id, for a replica.
    master_id: Option<String>,
    slots: Vec<RangeInclusive<u16>>,
}

impl ListedNode {
    fn is_master(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// A master with slots or a replica, up and known to be.
    fn settled(&self) -> bool {
        let role = if self.is_master() {
            !self.slots.is_empty()
        } else {
            self.master_id.is_some()
        };
        role && !self
            .flags
            .iter()
            .any(|f| ["fail", "fail?", "handshake", "noaddr"].contains(&f.as_str()))
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|r| r.contains(&slot))
    }
}

/// `CLUSTER NODES`: `ID IP:PORT@BUS[,HOSTNAME] FLAGS MASTER PING PONG EPOCH
/// LINK SLOT…`, a slot being `N`, `N-M`, or a migration in brackets
/// (skipped). Nodes without an address yet are left out.
fn parse_nodes(text: &str) -> Vec<ListedNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let address = fields[1].split(['@', ',']).next()?;
            let (ip, port) = address.rsplit_once(':')?;
            let addr = SocketAddr::new(ip.parse().ok()?, port.parse().ok()?);
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
                    None => s.parse().ok().map(|n| n..=n),
                })
                .collect();
            Some(ListedNode {
                id: fields[0].to_owned(),
                addr,
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

/// The `health` of every node in `CLUSTER SHARDS` as `redis-cli` prints it
/// (one field or value a line).
fn healths(shards: &str) -> Vec<&str> {
    let lines: Vec<&str> = shards.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|pair| pair[0] == "health")
        .map(|pair| pair[1])
        .collect()
}

/// The part of a key that picks its slot.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// CRC16-CCITT (XMODEM), Redis Cluster's key hash.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            }
        })
    })
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

    #[test]
    fn cluster_nodes_lines_give_roles_and_slots() {
        let listed = parse_nodes(
            "47316de6 127.0.0.1:21001@22001 myself,master - 0 1795 1 connected 0-5460 [6000->-e7c8]\n\
             2fa5cfd2 127.0.0.1:21006@22006,node6 slave 47316de6 0 1795 1 connected\n\
             bb9ae6ed 127.0.0.1:21003@22003 master,fail - 1795 1795 3 disconnected\n\
             e7c86846 127.0.0.1:21002@22002 master - 0 1795 2 connected 5461-10921 10922\n\
             0af491ea :0@0 slave,noaddr e7c86846 0 0 2 disconnected\n",
        );
        assert_eq!(listed.len(), 4);
        assert!(listed[0].is_master() && listed[0].serves(5460) && !listed[0].serves(6000));
        assert_eq!(listed[0].slots, [0..=5460]);
        assert_eq!(listed[1].master_id.as_deref(), Some("47316de6"));
        assert_eq!(listed[1].addr.port(), 21006);
        assert!(listed[2].is_master() && listed[2].slots.is_empty());
        assert!(listed[0].settled() && listed[1].settled() && !listed[2].settled());
        assert_eq!(listed[3].slots, [5461..=10921, 10922..=10922]);
    }
}
