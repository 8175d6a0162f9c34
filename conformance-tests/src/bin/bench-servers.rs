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
    let urls = [
        Postgres::shared().await.url(""),
        Mariadb::shared().await.url(""),
        Redis::shared().await.url(""),
        RedisSet::shared().await.url(""),
        Etcd::shared().await.url("bench", ""),
        Memcached::shared().await.url(""),
        ZooKeeper::shared().await.url("bench", ""),
    ];
    for url in urls {
        println!("{url}");
    }
    // The servers' watchdogs stop them when this process ends.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
