//! The floor of `redlock://`: `SET key owner NX PX ttl` on every master at
//! once, granted on a majority (what was set is deleted again otherwise),
//! then `EVALSHA` compare-and-delete on every master at once. No clock-drift
//! allowance, no fence counter, no retry delay.

use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::async_trait;
use distlock::backends::redis::RedisConfig;
use distlock::backends::redlock::RedlockConfig;
use distlock::{Error, Result};
use futures_util::future::join_all;

use super::primitive::Floor;
use super::redis_ops::RawNode;

/// A connection to each master.
pub(super) struct RedlockFloor {
    nodes: Vec<RawNode>,
    quorum: usize,
}

/// A key set to an owner on a majority.
pub(super) struct RedlockGrant {
    key: String,
    owner: String,
}

impl RedlockFloor {
    /// Connects to every master the URL names, with lock-redlock's per-node
    /// timeouts.
    pub(super) async fn open(url: &str) -> Result<Self> {
        let config = RedlockConfig::from_url(&distlock::backend_url(url)?)?;
        // Each master as lock-redlock reaches it: its TLS and per-node
        // timeouts.
        let options = RedisConfig::default()
            .tls(config.tls.clone())
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout);
        let mut nodes = Vec::new();
        for master in &config.masters {
            nodes.push(RawNode::connect(master, &options).await?);
        }
        Ok(Self {
            nodes,
            quorum: config.quorum(),
        })
    }

    async fn delete_everywhere(&self, key: &str, owner: &str) -> usize {
        join_all(self.nodes.iter().map(|n| n.compare_and_delete(key, owner)))
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(true)))
            .count()
    }
}

#[async_trait]
impl Floor for RedlockFloor {
    type Grant = RedlockGrant;

    fn describe(&self) -> String {
        format!(
            "redis-rs on {} masters at once: SET key owner NX PX ttl, granted on {} (else \
             compare-and-delete where set), then EVALSHA compare-and-delete on all",
            self.nodes.len(),
            self.quorum
        )
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<RedlockGrant>> {
        let key = format!("distlock-bench-floor:{name}");
        let owner = owner.to_hex();
        let results = join_all(self.nodes.iter().map(|n| n.set_nx_px(&key, &owner, ttl))).await;
        let set = results.iter().filter(|r| matches!(r, Ok(true))).count();
        if set >= self.quorum {
            return Ok(Some(RedlockGrant { key, owner }));
        }
        if set > 0 {
            self.delete_everywhere(&key, &owner).await;
        }
        let errors = results.iter().filter(|r| r.is_err()).count();
        if errors > self.nodes.len() - self.quorum {
            // Not enough masters answered to tell "held" from "down".
            return Err(results
                .into_iter()
                .find_map(std::result::Result::err)
                .unwrap_or_else(|| Error::backend("no quorum")));
        }
        Ok(None)
    }

    async fn release(&self, grant: &RedlockGrant) -> Result<()> {
        if self.delete_everywhere(&grant.key, &grant.owner).await >= self.quorum {
            Ok(())
        } else {
            Err(Error::not_held(grant.key.clone()))
        }
    }
}
