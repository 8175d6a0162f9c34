//! etcd's built-in Lock RPC (the `v3lock` service, as `etcdctl lock` uses
//! it), through `etcd_client::Client::lock` and `unlock`: grant a lease,
//! `Lock(name, lease)` (the server queues the caller behind earlier keys and
//! answers when it holds the lock), then `Unlock(key)` and revoke the lease.

use std::time::{Duration, Instant};

use distlock::Result;
use distlock::backend::async_trait;
use etcd_client::{Client, LockOptions};

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
        let mut c = self.client.clone();
        let lease = c
            .lease_grant(lease_seconds(self.ttl), None)
            .await
            .map_err(|e| convert("grant a lease", e))?
            .id();
        let name = format!("/distlock-bench-peer/{name}");
        let lock = c.lock(name, Some(LockOptions::new().with_lease(lease)));
        let until = tokio::time::Instant::from_std(until);
        let outcome = tokio::time::timeout_at(until, lock).await;
        match outcome {
            Ok(Ok(granted)) => Ok(Some(Box::new(EtcdHeld {
                client: self.client.clone(),
                key: granted.key().to_vec(),
                lease,
            }))),
            other => {
                // Revoking the lease deletes our key in the queue.
                self.client
                    .clone()
                    .lease_revoke(lease)
                    .await
                    .map_err(|e| convert("revoke a lease", e))?;
                match other {
                    Ok(Err(e)) => Err(convert("lock", e)),
                    _ => Ok(None),
                }
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
