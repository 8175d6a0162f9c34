//! The floor of `zk://`: `create` an ephemeral node (fails with
//! `NodeExists` while somebody holds it), then `delete` it, on a session
//! opened as lock-zk opens its own. No sequence numbers, no queue, no watch.

use super::primitive::floor_error;
use std::future::Future;
use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::async_trait;
use distlock::backends::zk::ZkConfig;
use distlock::{Error, Result};
use zookeeper_client as zk;

use super::primitive::Floor;

/// The floor's nodes live under this persistent node.
const ROOT: &str = "/distlock-bench-floor";

/// A session with the library's ensemble.
pub(super) struct ZkFloor {
    client: zk::Client,
    timeout: Duration,
}

/// An ephemeral node created by the floor.
pub(super) struct ZkGrant {
    path: String,
}

/// A session as lock-zk's `ZkBackend` opens one for the same URL (session
/// timeout, fail eagerly, digest auth), with its per-request timeout. The
/// chroot is ignored: the bench's nodes have their own root.
pub(crate) async fn session(url: &str) -> Result<(zk::Client, Duration)> {
    let config = ZkConfig::from_url(&distlock::backend_url(url)?)?;
    let mut connector = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_fail_eagerly();
    if let Some((user, password)) = &config.digest {
        let password = password.read(distlock::backends::zk::NAME)?;
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    let client = within(
        config.connect_timeout,
        "connect",
        connector.connect(&config.connect_string()),
    )
    .await?;
    Ok((client, config.timeout))
}

/// Runs one request within `timeout`, mapping ZooKeeper's connection
/// errors to retryable ones.
pub(crate) async fn within<T>(
    timeout: Duration,
    operation: &'static str,
    call: impl Future<Output = std::result::Result<T, zk::Error>>,
) -> Result<T> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| Error::timeout(operation, timeout))?
        .map_err(|e| convert(operation, e))
}

impl ZkFloor {
    pub(super) async fn open(url: &str) -> Result<Self> {
        let (client, timeout) = session(url).await?;
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match tokio::time::timeout(timeout, client.create(ROOT, b"", &options)).await {
            Ok(Ok(_) | Err(zk::Error::NodeExists)) => {}
            Ok(Err(e)) => return Err(convert("create the floor's root", e)),
            Err(_) => {
                return Err(Error::timeout("create the floor's root", timeout));
            }
        }
        Ok(Self { client, timeout })
    }
}

#[async_trait]
impl Floor for ZkFloor {
    type Grant = ZkGrant;

    fn describe(&self) -> String {
        "zookeeper-client on a session as lock-zk opens it: create an EPHEMERAL node, then \
         delete it"
            .to_owned()
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        _ttl: Duration,
    ) -> Result<Option<ZkGrant>> {
        let path = format!("{ROOT}/{name}");
        let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        let owner = owner.to_hex();
        let create = self.client.create(&path, owner.as_bytes(), &options);
        match tokio::time::timeout(self.timeout, create).await {
            Ok(Ok(_)) => Ok(Some(ZkGrant { path })),
            Ok(Err(zk::Error::NodeExists)) => Ok(None),
            Ok(Err(e)) => Err(convert("create", e)),
            Err(_) => Err(Error::timeout("create", self.timeout)),
        }
    }

    async fn release(&self, grant: &ZkGrant) -> Result<()> {
        match tokio::time::timeout(self.timeout, self.client.delete(&grant.path, None)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(zk::Error::NoNode)) => Err(Error::not_held(grant.path.clone())),
            Ok(Err(e)) => Err(convert("delete", e)),
            Err(_) => Err(Error::timeout("delete", self.timeout)),
        }
    }

    /// An ephemeral node lasts as long as its session, which lives on.
    fn leases_expire(&self) -> bool {
        false
    }
}

/// Connection loss is worth retrying; anything else ends the run.
fn convert(operation: &str, e: zk::Error) -> Error {
    let transient = matches!(e, zk::Error::ConnectionLoss);
    floor_error("zk", operation, transient, e)
}
