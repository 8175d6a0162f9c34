//! The connection a [`Node`](crate::node::Node) sends its commands on: to
//! one server, or to a Redis Cluster, where redis-rs's cluster client
//! routes each command to the master of its key's slot and follows
//! `MOVED` and `ASK` as slots move.

use std::time::Duration;

use lock_core::{Error, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Pipeline, RedisFuture, Value};

use crate::error::convert;

/// One server's reconnecting connection, or a cluster's.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// A connection manager to `client`: reconnecting by itself, each command
/// bounded by `timeout`.
pub(crate) async fn open(
    client: &Client,
    label: &str,
    connect_timeout: Duration,
    timeout: Duration,
) -> Result<Conn> {
    let manager = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1);
    let connect = client.get_connection_manager_with_config(manager);
    let conn = tokio::time::timeout(connect_timeout, connect)
        .await
        .map_err(|_| Error::timeout("connecting to redis", connect_timeout))?
        .map_err(|e| convert(label, "connect", connect_timeout, e))?;
    Ok(Conn::Single(conn))
}

/// A cluster connection through `client`, which learns the cluster's
/// slots from whichever of its seed nodes answers first.
pub(crate) async fn open_cluster(
    client: &ClusterClient,
    label: &str,
    connect_timeout: Duration,
) -> Result<ClusterConnection> {
    tokio::time::timeout(connect_timeout, client.get_async_connection())
        .await
        .map_err(|_| Error::timeout("connecting to the redis cluster", connect_timeout))?
        .map_err(|e| convert(label, "connect", connect_timeout, e))
}
