//! The two raw Redis commands the Redis and Redlock floors share: `SET key
//! owner NX PX ttl`, and `EVALSHA` of a compare-and-delete script, on a
//! connection lock-redis opens as it opens its own (`lock_redis::conn`).

use super::primitive::floor_error;
use std::time::Duration;

use distlock::{Error, Result};
use lock_redis::conn::{Conn, open};
use lock_redis::{RedisConfig, Server};

/// The smallest safe release: delete the key only if it still holds our
/// value.
const COMPARE_AND_DELETE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// One server, or a cluster through redis-rs's cluster client.
#[derive(Clone)]
pub(super) struct RawNode {
    conn: Conn,
    script: redis::Script,
    label: String,
}

impl RawNode {
    /// Connects to `server` with the TLS and timeouts of `config`, as
    /// lock-redis connects (its connection-manager settings).
    pub(super) async fn connect(server: &Server, config: &RedisConfig) -> Result<Self> {
        let client = server.client(&config.tls)?;
        let label = &server.addr;
        let conn = open(&client, label, config.connect_timeout, config.timeout).await?;
        Ok(Self::on(conn, label))
    }

    /// The Redis Cluster `config` names through its seed nodes, with
    /// lock-redis's timeouts and TLS: each command goes to the master of
    /// its key's slot.
    #[cfg(feature = "redis")]
    pub(super) async fn connect_cluster(config: &RedisConfig, label: &str) -> Result<Self> {
        use lock_redis::conn::{cluster_client, open_cluster};
        let client = cluster_client(config)?
            .build()
            .map_err(|e| convert(label, "connect", e))?;
        let tls = config.tls.is_enabled();
        let conn = open_cluster(&client, label, config.connect_timeout, tls).await?;
        Ok(Self::on(Conn::Cluster(conn), label))
    }

    fn on(conn: Conn, label: &str) -> Self {
        Self {
            conn,
            script: redis::Script::new(COMPARE_AND_DELETE),
            label: label.to_owned(),
        }
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
