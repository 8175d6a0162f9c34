//! The floor of `etcd://`: grant a lease, then one transaction that puts the
//! key with that lease if its create revision is 0; release revokes the
//! lease (which deletes the key). A failed attempt revokes its lease too, so
//! spinning does not pile up leases. Same client options as lock-etcd. No
//! queue, no watch.

use super::primitive::floor_error;
use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::async_trait;
use distlock::backends::etcd::EtcdConfig;
use distlock::{Error, Result};
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::primitive::Floor;

/// A client of the library's cluster.
pub(super) struct EtcdFloor {
    client: Client,
}

/// A key held under a lease.
pub(super) struct EtcdGrant {
    key: String,
    lease: i64,
}

/// The client lock-etcd's `EtcdBackend::connect` makes for the same URL.
pub(crate) async fn client(url: &str) -> Result<Client> {
    let config = EtcdConfig::from_url(&distlock::backend_url(url)?)?;
    distlock::backends::etcd::client::connect(&config).await
}

/// Whole seconds, rounded up, as etcd leases take them.
pub(crate) fn lease_seconds(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).unwrap_or(i64::MAX)
}

impl EtcdFloor {
    pub(super) async fn open(url: &str) -> Result<Self> {
        Ok(Self {
            client: client(url).await?,
        })
    }
}

#[async_trait]
impl Floor for EtcdFloor {
    type Grant = EtcdGrant;

    fn describe(&self) -> String {
        "etcd-client as lock-etcd connects: LeaseGrant, then Txn(create_revision == 0 → put \
         with the lease) (LeaseRevoke if it failed), then LeaseRevoke"
            .to_owned()
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<EtcdGrant>> {
        let mut c = self.client.clone();
        let lease = c
            .lease_grant(lease_seconds(ttl), None)
            .await
            .map_err(|e| convert("grant a lease", e))?
            .id();
        let key = format!("/distlock-bench-floor/{name}");
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                owner.to_hex(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let put = c.txn(txn).await.map_err(|e| convert("put", e));
        match put {
            Ok(r) if r.succeeded() => Ok(Some(EtcdGrant { key, lease })),
            other => {
                c.lease_revoke(lease)
                    .await
                    .map_err(|e| convert("revoke a lease", e))?;
                other.map(|_| None)
            }
        }
    }

    async fn release(&self, grant: &EtcdGrant) -> Result<()> {
        match self.client.clone().lease_revoke(grant.lease).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("not found") => {
                Err(Error::not_held(grant.key.clone()))
            }
            Err(e) => Err(convert("revoke a lease", e)),
        }
    }
}

/// Unavailable members, deadlines and transport trouble are worth retrying;
/// anything else ends the run.
pub(crate) fn convert(operation: &str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    // gRPC codes: 1 cancelled (the client's own request timeout, as
    // lock-etcd reads it), 2 unknown, 4 deadline exceeded, 8 resource
    // exhausted, 10 aborted, 14 unavailable (tonic's `Code` is not
    // re-exported).
    let transient = match &e {
        E::GRpcStatus(status) => matches!(status.code() as i32, 1 | 2 | 4 | 8 | 10 | 14),
        E::TransportError(_) | E::IoError(_) | E::EndpointError(_) => true,
        _ => false,
    };
    floor_error("etcd", operation, transient, e)
}
