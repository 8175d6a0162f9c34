//! etcd's built-in Election RPC (the `v3election` service, as `etcdctl
//! elect` uses it), through etcd-client's `ElectionClient`: grant a lease,
//! `Campaign(name, value, lease)` (the server puts the candidate's key and
//! answers once every older key of the election is gone), then
//! `Resign(leader)` and revoke the lease. A peer of the election workload
//! only: it keeps no lock.

use std::time::{Duration, Instant};

use distlock::backend::async_trait;
use distlock::{Error, Result};
use etcd_client::{Client, LeaderKey, ResignOptions};

use super::etcd_wait::{Waited, on_lease};
use crate::cli::bench::contender::{Contender, Held, Role, Subject};
use crate::cli::bench::floor::etcd::{client, convert, lease_seconds};

/// What the peer's candidates proclaim.
const CANDIDATE: &str = "distlock-bench-peer";

pub(super) struct EtcdElection {
    client: Client,
    ttl: Duration,
}

impl EtcdElection {
    pub(super) async fn open(url: &str, ttl: Duration) -> Result<Self> {
        Ok(Self {
            client: client(url).await?,
            ttl,
        })
    }

    /// A lease of `ttl` in whole seconds, and the TTL the server granted.
    async fn lease(&self, ttl: Duration) -> Result<(i64, Duration)> {
        let granted = self
            .client
            .clone()
            .lease_grant(lease_seconds(ttl), None)
            .await
            .map_err(|e| convert("grant a lease", e))?;
        let seconds = u64::try_from(granted.ttl()).unwrap_or(0);
        Ok((granted.id(), Duration::from_secs(seconds)))
    }

    /// Campaigns in `name` on leases of `ttl` until `until`: the leader's
    /// key and lease, and the TTL the server granted it.
    async fn campaign_until(
        &self,
        name: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<(LeaderKey, i64, Duration)>> {
        let name = format!("/distlock-bench-peer/{name}");
        loop {
            let (lease, granted) = self.lease(ttl).await?;
            let mut election = self.client.election_client();
            let campaign = election.campaign(name.clone(), CANDIDATE, lease);
            match on_lease(&self.client, lease, until, "campaign", campaign).await? {
                Waited::Granted(mut led) => {
                    let leader = led.take_leader().ok_or_else(|| {
                        Error::backend("etcd's Campaign answered without a leader key")
                    })?;
                    return Ok(Some((leader, lease, granted)));
                }
                Waited::Again => {}
                Waited::TimedOut => return Ok(None),
            }
        }
    }
}

#[async_trait]
impl Contender for EtcdElection {
    fn subject(&self) -> Subject {
        Subject {
            role: Role::Peer,
            name: "etcd-election-rpc".to_owned(),
            detail: "etcd's Election RPC via etcd-client's ElectionClient: LeaseGrant, \
                     Campaign(name, value, lease) (the server waits for every older \
                     candidate's key to go), then Resign(leader) and LeaseRevoke"
                .to_owned(),
        }
    }

    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        let _ = (name, until);
        Err(Error::unsupported("etcd's Election RPC", "locks"))
    }

    async fn campaign(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        // A lease that outlives the wait: a standby sends no keep-alives.
        let wait = until.saturating_duration_since(Instant::now());
        Ok(self
            .campaign_until(name, self.ttl.max(wait), until)
            .await?
            .map(|(leader, lease, _)| -> Box<dyn Held> {
                Box::new(EtcdLeader {
                    client: self.client.clone(),
                    leader,
                    lease,
                })
            }))
    }

    async fn abandoned_lead(
        &self,
        name: &str,
        ttl: Duration,
        until: Instant,
    ) -> Result<Option<Duration>> {
        // Leading on a lease nobody keeps alive, resigns or revokes.
        match self.campaign_until(name, ttl, until).await? {
            Some((_, _, granted)) => Ok(Some(granted)),
            None => Err(Error::backend(format!(
                "etcd's Campaign did not lead the fresh election {name}"
            ))),
        }
    }
}

struct EtcdLeader {
    client: Client,
    leader: LeaderKey,
    lease: i64,
}

#[async_trait]
impl Held for EtcdLeader {
    async fn release(self: Box<Self>) -> Result<()> {
        let resign = ResignOptions::new().with_leader(self.leader.clone());
        self.client
            .election_client()
            .resign(Some(resign))
            .await
            .map_err(|e| convert("resign", e))?;
        self.client
            .clone()
            .lease_revoke(self.lease)
            .await
            .map_err(|e| convert("revoke a lease", e))?;
        Ok(())
    }
}
