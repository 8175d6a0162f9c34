//! zookeeper-client's own lock (`Client::lock` with a Curator-compatible
//! `LockPrefix::new_curator`): an ephemeral-sequential node, waiting on the
//! predecessor's deletion; released by dropping the lock client, which
//! deletes the node in the background (the crate's own release).

use std::time::Instant;

use distlock::backend::async_trait;
use distlock::{Error, Result};
use zookeeper_client as zk;

use crate::cli::bench::contender::{Contender, Held, Role, Subject};
use crate::cli::bench::floor::zk::session;

pub(super) struct ZkLock {
    client: zk::Client,
}

impl ZkLock {
    pub(super) async fn open(url: &str) -> Result<Self> {
        Ok(Self {
            client: session(url).await?.0,
        })
    }
}

#[async_trait]
impl Contender for ZkLock {
    fn subject(&self) -> Subject {
        Subject {
            role: Role::Peer,
            name: "zk-client-lock".to_owned(),
            detail: "zookeeper-client Client::lock with LockPrefix::new_curator \
                     (ephemeral-sequential, watches the predecessor), released by dropping \
                     the lock client (background delete)"
                .to_owned(),
        }
    }

    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        let dir = format!("/distlock-bench-peer/{name}");
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-")
            .map_err(|e| Error::backend(format!("zk lock prefix: {e}")))?;
        let acls = zk::Acls::anyone_all();
        let options = zk::LockOptions::new(acls)
            .with_ancestor_options(zk::CreateMode::Persistent.with_acls(acls))
            .map_err(|e| Error::backend(format!("zk lock options: {e}")))?;
        let until = tokio::time::Instant::from_std(until);
        match tokio::time::timeout_at(until, self.client.lock(prefix, b"", options)).await {
            Ok(Ok(lock)) => Ok(Some(Box::new(lock.into_owned()))),
            Ok(Err(zk::Error::ConnectionLoss)) | Err(_) => Ok(None),
            Ok(Err(e)) => Err(Error::backend(format!("zk lock: {e}"))),
        }
    }
}

#[async_trait]
impl Held for zk::OwnedLockClient {
    async fn release(self: Box<Self>) -> Result<()> {
        drop(self);
        Ok(())
    }
}
