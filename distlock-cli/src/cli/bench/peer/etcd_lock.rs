//! etcd's built-in Lock RPC (the `v3lock` service, as `etcdctl lock` uses
//! it), through `etcd_client::Client::lock` and `unlock`: grant a lease,
//! `Lock(name, lease)` (the server queues the caller behind earlier keys and
//! answers when it holds the lock), then `Unlock(key)` and revoke the lease.

use std::time::{Duration, Instant};

use distlock::Result;
use distlock::backend::async_trait;
use etcd_client::{Client, LockOptions};

use super::etcd_wait::{Waited, on_lease};
use crate::cli::bench::contender::{Contender, Held, Role, Subject};
use crate::cli::bench::floor::etcd::{client, convert, lease_seconds};

pub(super) struct EtcdLock {
    client: Client,
    ttl: Duration,
}

impl EtcdLock {
    pub(super) async fn open(url: &str, ttl: Duration) -> Result<Self> {
        Ok(Self {
            client: client(url).await?,
            ttl,
        })
    }
}

#[async_trait]
impl Contender for EtcdLock {
    fn subject(&self) -> Subject {
        Subject {
            role: Role::Peer,
            name: "etcd-lock-rpc".to_owned(),
            detail: "etcd's Lock RPC via etcd-client: LeaseGrant, Lock(name, lease) (server-side \
                     FIFO queue), then Unlock(key) and LeaseRevoke"
                .to_owned(),
        }
    }

    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        let name = format!("/distlock-bench-peer/{name}");
        loop {
            let mut c = self.client.clone();
            let lease = c
                .lease_grant(lease_seconds(self.ttl), None)
                .await
                .map_err(|e| convert("grant a lease", e))?
                .id();
            let lock = c.lock(name.clone(), Some(LockOptions::new().with_lease(lease)));
            match on_lease(&self.client, lease, until, "lock", lock).await? {
                Waited::Granted(granted) => {
                    return Ok(Some(Box::new(EtcdHeld {
                        client: self.client.clone(),
                        key: granted.key().to_vec(),
                        lease,
                    })));
                }
                Waited::Again => {}
                Waited::TimedOut => return Ok(None),
            }
        }
    }
}

struct EtcdHeld {
    client: Client,
    key: Vec<u8>,
    lease: i64,
}

#[async_trait]
impl Held for EtcdHeld {
    async fn release(self: Box<Self>) -> Result<()> {
        let mut c = self.client.clone();
        c.unlock(self.key.clone())
            .await
            .map_err(|e| convert("unlock", e))?;
        c.lease_revoke(self.lease)
            .await
            .map_err(|e| convert("revoke a lease", e))?;
        Ok(())
    }
}
