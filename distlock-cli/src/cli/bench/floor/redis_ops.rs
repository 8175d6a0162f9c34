//! The two raw Redis commands the Redis and Redlock floors share: `SET key
//! owner NX PX ttl`, and `EVALSHA` of a compare-and-delete script, on a
//! `ConnectionManager` configured as lock-redis's `node.rs` configures it.

use super::floor_error;
use std::time::Duration;

use distlock::{Error, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// The smallest safe release: delete the key only if it still holds our
/// value.
const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// One server, or a cluster through redis-rs's cluster client.
#[derive(Clone)]
pub(super) struct RawNode {
    conn: RawConn,
    script: redis::Script,
    label: String,
}

impl RawNode {
    /// Connects to `url` (`redis://host:port[/db]`) with lock-redis's
    /// connection-manager settings.
    pub(super) async fn connect(
        url: &str,
        label: &str,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let client =
            redis::Client::open(url).map_err(|e| Error::invalid_url(url, e.to_string()))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let conn = tokio::time::timeout(
            connect_timeout,
            client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| Error::Timeout {
            operation: "connecting to redis",
            after: connect_timeout,
        })?
        .map_err(|e| convert(label, "connect", e))?;
        Ok(Self {
            conn: RawConn::Single(conn),
            script: redis::Script::new(COMPARE_AND_DELETE),
            label: label.to_owned(),
        })
    }

    /// A Redis Cluster through its seed nodes `urls`, with lock-redis's
    /// timeouts: each command goes to the master of its key's slot.
    pub(super) async fn connect_cluster(
        urls: Vec<String>,
        label: &str,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let client = ClusterClient::builder(urls)
            .connection_timeout(connect_timeout)
            .response_timeout(timeout)
            .retries(2)
            .build()
            .map_err(|e| convert(label, "connect", e))?;
        let conn = tokio::time::timeout(connect_timeout, client.get_async_connection())
            .await
            .map_err(|_| Error::Timeout {
                operation: "connecting to the redis cluster",
                after: connect_timeout,
            })?
            .map_err(|e| convert(label, "connect", e))?;
        Ok(Self {
            conn: RawConn::Cluster(conn),
            script: redis::Script::new(COMPARE_AND_DELETE),
            label: label.to_owned(),
        })
    }

    /// `SET key owner NX PX ttl`: `true` if set.
    pub(super) async fn set_nx_px(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool> {
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| convert(&self.label, "SET NX PX", e))?;
        Ok(set.is_some())
    }

    /// `EVALSHA` of the compare-and-delete script (`EVAL` once if the server
    /// does not know it yet): `true` if deleted.
    pub(super) async fn compare_and_delete(&self, key: &str, owner: &str) -> Result<bool> {
        let deleted: i64 = self
            .script
            .key(key)
            .arg(owner)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| convert(&self.label, "compare-and-delete", e))?;
        Ok(deleted == 1)
    }
}

/// Connection trouble and timeouts are worth retrying; anything else ends
/// the run.
fn convert(label: &str, operation: &str, e: redis::RedisError) -> Error {
    let transient =
        e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal();
    floor_error("redis", &format!("{operation} on {label}"), transient, e)
}

/// What a [`RawNode`] sends on.
#[derive(Clone)]
enum RawConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RawConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RawConn::Single(c) => c.req_packed_command(cmd),
            RawConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RawConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RawConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RawConn::Single(c) => c.get_db(),
            RawConn::Cluster(c) => c.get_db(),
        }
    }
}
