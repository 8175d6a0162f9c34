//! Starts one server of every backend on free loopback ports, the way the
//! tests do, prints one `distlock bench --url` argument per line, and keeps
//! the servers until its standard input closes. `scripts/bench` runs it.

use std::io::Read;

use conformance_tests::servers::SqlServer;
use conformance_tests::servers::{
    etcd::Etcd, mariadb::Mariadb, memcached::Memcached, postgres::Postgres, redis::Redis,
    redis::RedisSet, zookeeper::ZooKeeper,
};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Servers of its own even where a DISTLOCK_TEST_* variable names one:
    // the benchmarks compare runs on like servers.
    let (postgres, mariadb) = (Postgres::start().await, Mariadb::start().await);
    let (redis, masters) = (Redis::start().await, RedisSet::start(5).await);
    let (etcd, memcached) = (Etcd::start().await, Memcached::start().await);
    let zookeeper = ZooKeeper::start().await;
    let urls = [
        postgres.url(""),
        mariadb.url(""),
        redis.url(""),
        masters.url(""),
        etcd.url("bench", ""),
        memcached.url(""),
        zookeeper.url("bench", ""),
    ];
    for url in urls {
        println!("{url}");
    }
    // The servers' watchdogs stop them when this process ends.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
