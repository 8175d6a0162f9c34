//! The floor of `redis://`: `SET key owner NX PX ttl`, then `EVALSHA` of a
//! compare-and-delete script, on one `ConnectionManager` configured as
//! lock-redis configures its own. No fence counter, no pub/sub notice. For
//! `redis+cluster://`, the same two commands through redis-rs's cluster
//! client.

use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::async_trait;
use distlock::backends::redis::{RedisConfig, Topology};
use distlock::{Error, Result};

use super::primitive::Floor;
use super::redis_ops::RawNode;

/// A connection to the library's server.
pub(super) struct RedisFloor {
    node: RawNode,
}

/// A key set to an owner.
pub(super) struct RedisGrant {
    key: String,
    owner: String,
}

impl RedisFloor {
    /// Connects as lock-redis connects for the same URL (its timeouts).
    pub(super) async fn open(url: &str) -> Result<Self> {
        let config = RedisConfig::from_url(&distlock::backend_url(url)?)?;
        let node = match &config.topology {
            Topology::Single(server) => RawNode::connect(server, &config).await?,
            Topology::Cluster(seeds) => {
                let label = seeds.first().map_or("cluster", |s| s.addr.as_str());
                RawNode::connect_cluster(&config, label).await?
            }
            _ => {
                return Err(Error::unsupported(
                    "redis",
                    "a benchmark floor through Sentinel (measure the master with redis://HOST:PORT)",
                ));
            }
        };
        Ok(Self { node })
    }
}

#[async_trait]
impl Floor for RedisFloor {
    type Grant = RedisGrant;

    fn describe(&self) -> String {
        "redis-rs ConnectionManager as lock-redis opens it: SET key owner NX PX ttl, then \
         EVALSHA compare-and-delete"
            .to_owned()
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<RedisGrant>> {
        let key = format!("distlock-bench-floor:{name}");
        let owner = owner.to_hex();
        Ok(self
            .node
            .set_nx_px(&key, &owner, ttl)
            .await?
            .then_some(RedisGrant { key, owner }))
    }

    async fn release(&self, grant: &RedisGrant) -> Result<()> {
        if self
            .node
            .compare_and_delete(&grant.key, &grant.owner)
            .await?
        {
            Ok(())
        } else {
            Err(Error::not_held(grant.key.clone()))
        }
    }
}
