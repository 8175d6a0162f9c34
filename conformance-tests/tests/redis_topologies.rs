//! The Redis Cluster and Sentinel topologies of the harness, shown to work
//! with plain `redis` clients (its cluster and sentinel clients, no
//! distlock): the cluster's three masters cover every slot and each has a
//! replica, keys land where the harness says, a master killed or frozen is
//! replaced by its replica and rejoins as one; the sentinels name the
//! master, promote the replica when it dies, and a replica whose link was
//! held is promoted without the writes it missed. The shared cluster and
//! sentinels are those `DISTLOCK_TEST_REDIS_CLUSTER_URL` and
//! `DISTLOCK_TEST_REDIS_SENTINEL_URL` name, if set; the failover tests
//! start their own.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::time::Duration;

use conformance_tests::servers::redis::Redis;
use conformance_tests::servers::redis_cluster::{RedisCluster, SLOTS};
use conformance_tests::servers::redis_sentinel::RedisSentinel;
use conformance_tests::targets::fresh_table;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, IntoConnectionInfo, Value};
use tokio::time::{Instant, sleep};

/// What a failover may take here: a few seconds, with room for a loaded
/// machine.
const FAILOVER_BOUND: Duration = Duration::from_secs(30);

/// A plain client of one node.
async fn plain(node: &Redis) -> MultiplexedConnection {
    redis::Client::open(node.url(""))
        .expect("a redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect a plain client")
}

/// A cluster client given every node.
async fn cluster_client(cluster: &RedisCluster) -> ClusterConnection {
    let urls: Vec<String> = cluster.nodes().iter().map(|n| n.url("")).collect();
    ClusterClient::new(urls)
        .expect("node URLs")
        .get_async_connection()
        .await
        .expect("connect a cluster client")
}

/// A client of the master the sentinels name, logged in as the data
/// nodes' user.
async fn sentinel_client(topology: &RedisSentinel) -> MultiplexedConnection {
    let login = topology.data_nodes()[0]
        .url("")
        .into_connection_info()
        .expect("a redis URL");
    let login = login.redis_settings();
    let sentinels = topology.sentinels().iter().map(|s| {
        let addr = s.socket_addr();
        ConnectionAddr::Tcp(addr.ip().to_string(), addr.port())
    });
    let mut builder =
        SentinelClientBuilder::new(sentinels, topology.name(), SentinelServerType::Master)
            .expect("sentinel addresses");
    if let Some(user) = login.username() {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = login.password() {
        builder = builder.set_client_to_redis_password(password);
    }
    builder
        .build()
        .expect("a sentinel client")
        .get_async_connection()
        .await
        .expect("connect through the sentinels")
}

async fn set(conn: &mut impl redis::aio::ConnectionLike, key: &str, value: &str) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async::<()>(conn)
        .await
        .unwrap_or_else(|e| panic!("SET {key}: {e}"));
}

async fn get(conn: &mut impl redis::aio::ConnectionLike, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("GET {key}: {e}"))
}

/// `WAIT replicas ms` on the connection that wrote: how many replicas
/// acknowledged its writes.
async fn wait_replicas(conn: &mut MultiplexedConnection, replicas: u32, ms: u64) -> i64 {
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(ms)
        .query_async(conn)
        .await
        .expect("WAIT")
}

/// `CLUSTER SLOTS` from a node: each range of slots with its master's
/// port and its replicas' ports.
async fn slot_table(node: &Redis) -> Vec<(RangeInclusive<u16>, u16, Vec<u16>)> {
    let ranges: Vec<Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut plain(node).await)
        .await
        .expect("CLUSTER SLOTS");
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).expect("a slot or port"),
        other => panic!("not a number in CLUSTER SLOTS: {other:?}"),
    };
    let port = |v: &Value| match v {
        Value::Array(node) => int(&node[1]),
        other => panic!("not a node in CLUSTER SLOTS: {other:?}"),
    };
    ranges
        .iter()
        .map(|range| match range {
            Value::Array(fields) => (
                int(&fields[0])..=int(&fields[1]),
                port(&fields[2]),
                fields[3..].iter().map(port).collect(),
            ),
            other => panic!("not a range in CLUSTER SLOTS: {other:?}"),
        })
        .collect()
}

/// Retries `GET` through a cluster client for a while: the first request
/// after a failover may meet the dead master before the client refreshes
/// its slot map.
async fn get_after_failover(conn: &mut ClusterConnection, key: &str) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match redis::cmd("GET").arg(key).query_async(conn).await {
            Ok(value) => return value,
            Err(e) if Instant::now() < deadline => {
                eprintln!("GET {key} after the failover: {e}; retrying");
                sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("GET {key} still fails 10 s after the failover: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_has_three_masters_covering_every_slot_each_with_a_replica() {
    let cluster = RedisCluster::shared().await;
    let masters = cluster.masters().await;
    let replicas = cluster.replicas().await;
    assert_eq!(masters.len(), 3, "masters");
    assert_eq!(replicas.len(), 3, "replicas");
    for master in &masters {
        let of = cluster.replicas_of(master).await;
        assert_eq!(of.len(), 1, "replicas of {}", master.port());
        assert!(replicas.iter().any(|r| r.port() == of[0].port()));
    }

    // What the server says, against what the harness says.
    let mut table = slot_table(&cluster.nodes()[0]).await;
    table.sort_by_key(|(range, _, _)| *range.start());
    let mut next = 0;
    for (range, master, replicas) in &table {
        assert_eq!(*range.start(), next, "slots {next}.. are not covered");
        next = range.end() + 1;
        assert_eq!(replicas.len(), 1, "replicas of the slots {range:?}");
        assert_eq!(cluster.master_of_slot(*range.start()).await.port(), *master);
        assert_eq!(cluster.master_of_slot(*range.end()).await.port(), *master);
    }
    assert_eq!(next, SLOTS, "every slot is served");
    let serving: BTreeSet<u16> = table.iter().map(|(_, master, _)| *master).collect();
    let listed: BTreeSet<u16> = masters.iter().map(|m| m.port()).collect();
    assert_eq!(serving, listed);

    let mut conn = plain(&cluster.nodes()[0]).await;
    for key in [
        "foo",
        "{user1000}.following",
        "locks:{a/b}:fence",
        "{}x",
        "é",
    ] {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("CLUSTER KEYSLOT");
        assert_eq!(RedisCluster::slot_of(key), slot, "slot of {key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_through_a_cluster_client_are_on_their_slots_master() {
    let cluster = RedisCluster::shared().await;
    let mut client = cluster_client(cluster).await;
    let prefix = fresh_table();
    let masters: Vec<u16> = cluster.masters().await.iter().map(|m| m.port()).collect();
    // One key for each master, found by slot.
    let mut keys: BTreeMap<u16, String> = BTreeMap::new();
    let table = slot_table(&cluster.nodes()[0]).await;
    for i in 0..1000 {
        let key = format!("{prefix}:{i}");
        let slot = RedisCluster::slot_of(&key);
        let (_, master, _) = table
            .iter()
            .find(|(range, _, _)| range.contains(&slot))
            .expect("every slot is served");
        keys.entry(*master).or_insert(key);
        if keys.len() == masters.len() {
            break;
        }
    }
    assert_eq!(keys.len(), 3, "a key for each master");
    for (port, key) in &keys {
        set(&mut client, key, port.to_string().as_str()).await;
        assert_eq!(get(&mut client, key).await, Some(port.to_string()));
        let owner = cluster.master_of_slot(RedisCluster::slot_of(key)).await;
        assert_eq!(owner.port(), *port);
        assert_eq!(
            owner.cli(&["GET", key]).expect("redis-cli").trim(),
            port.to_string(),
            "{key} on the master of its slot"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_by_its_replica_and_rejoins_as_one() {
    let cluster = RedisCluster::start().await;
    let mut client = cluster_client(&cluster).await;
    let key = "failover";
    let slot = RedisCluster::slot_of(key);
    set(&mut client, key, "kept").await;
    let master = cluster.master_of_slot(slot).await;
    let replicas = cluster.replicas_of(master).await;
    assert_eq!(replicas.len(), 1);
    let replica = replicas[0];

    // The write has reached the replica before the master dies.
    let mut on_replica = plain(replica).await;
    redis::cmd("READONLY")
        .query_async::<()>(&mut on_replica)
        .await
        .expect("READONLY");
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&mut on_replica, key).await.is_none() {
        assert!(Instant::now() < deadline, "the replica never got {key}");
        sleep(Duration::from_millis(50)).await;
    }

    let killed_at = Instant::now();
    let killed = cluster.kill_master_of_slot(slot).await;
    assert_eq!(killed.port(), master.port());
    let promoted = cluster.wait_for_failover(slot).await;
    let took = killed_at.elapsed();
    eprintln!("cluster failover: slot {slot} served again after {took:?}");
    assert_eq!(promoted.port(), replica.port(), "the replica took over");
    assert!(took < FAILOVER_BOUND, "the failover took {took:?}");
    assert_eq!(cluster.masters().await.len(), 3);

    // The client that knew the old master follows the slot.
    assert_eq!(
        get_after_failover(&mut client, key).await.as_deref(),
        Some("kept")
    );
    set(&mut client, "{failover}:after", "written").await;
    // So does a new one given every node, the dead one too.
    let mut fresh = cluster_client(&cluster).await;
    assert_eq!(
        get(&mut fresh, "{failover}:after").await.as_deref(),
        Some("written")
    );

    killed.process().restart();
    cluster.wait_ready().await;
    let of = cluster.replicas_of(promoted).await;
    assert_eq!(of.len(), 1);
    assert_eq!(
        of[0].port(),
        killed.port(),
        "the old master is the new one's replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_is_failed_over_and_thaws_into_a_replica() {
    let cluster = RedisCluster::start().await;
    let master = cluster.master_of_slot(0).await;
    let replica = cluster.replicas_of(master).await[0];
    master.process().pause();
    let promoted = cluster.wait_for_failover(0).await;
    assert_eq!(promoted.port(), replica.port(), "the replica took over");
    master.process().resume();
    cluster.wait_ready().await;
    let of = cluster.replicas_of(promoted).await;
    assert_eq!(of.len(), 1);
    assert_eq!(
        of[0].port(),
        master.port(),
        "the thawed master is a replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinels_name_the_master_and_a_sentinel_client_writes_to_it() {
    let topology = RedisSentinel::shared().await;
    let master = topology.master().await;
    for sentinel in topology.sentinels() {
        let (ip, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(topology.name())
            .query_async(&mut plain(sentinel).await)
            .await
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME");
        assert_eq!(
            (ip.parse().expect("an IP"), port),
            (master.socket_addr().ip(), master.port()),
            "sentinel {}",
            sentinel.port()
        );
    }

    let key = format!("{}:sentinel", fresh_table());
    let mut conn = sentinel_client(topology).await;
    set(&mut conn, &key, "v").await;
    let (_, port): (String, u16) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query_async(&mut conn)
        .await
        .expect("CONFIG GET port");
    assert_eq!(
        port,
        master.port(),
        "the sentinel client reached the master"
    );
    assert_eq!(
        wait_replicas(&mut conn, 1, 10_000).await,
        1,
        "the replica acknowledged"
    );
    let replica = topology.replica().await;
    assert_eq!(
        get(&mut plain(replica).await, &key).await.as_deref(),
        Some("v")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_master_promotes_the_replica_which_takes_writes() {
    let topology = RedisSentinel::start().await;
    let old = topology.master().await;
    let replica = topology.replica().await;
    let killed_at = Instant::now();
    assert_eq!(topology.kill_master().await.port(), old.port());
    let promoted = topology.wait_for_failover(old).await;
    let took = killed_at.elapsed();
    eprintln!("sentinel failover: a new master after {took:?}");
    assert_eq!(promoted.port(), replica.port(), "the replica was promoted");
    assert!(took < FAILOVER_BOUND, "the failover took {took:?}");

    let mut conn = sentinel_client(&topology).await;
    set(&mut conn, "after", "written").await;
    let (_, port): (String, u16) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query_async(&mut conn)
        .await
        .expect("CONFIG GET port");
    assert_eq!(port, promoted.port());
    assert_eq!(topology.master().await.port(), promoted.port());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_link_was_held_is_promoted_without_what_it_missed() {
    let topology = RedisSentinel::start().await;
    let master = topology.master().await;
    let replica = topology.replica().await;
    let mut conn = plain(master).await;

    // A hold that is let go: the replica catches up.
    topology.hold_replication().await;
    set(&mut conn, "caught-up", "v").await;
    assert_eq!(wait_replicas(&mut conn, 1, 300).await, 0, "held");
    topology.resume_replication();
    assert_eq!(wait_replicas(&mut conn, 1, 10_000).await, 1, "let go");

    // A hold the master does not outlive.
    topology.hold_replication().await;
    set(&mut conn, "missed", "v").await;
    assert_eq!(wait_replicas(&mut conn, 1, 300).await, 0, "held");
    topology.kill_master().await;
    let promoted = topology.wait_for_failover(master).await;
    assert_eq!(promoted.port(), replica.port());

    let mut on_promoted = plain(promoted).await;
    assert_eq!(
        get(&mut on_promoted, "caught-up").await.as_deref(),
        Some("v")
    );
    assert_eq!(
        get(&mut on_promoted, "missed").await,
        None,
        "the write made while the link was held is lost"
    );
}
