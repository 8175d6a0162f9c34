//! `wait_replicas`: grants and renewals that count only once the replicas
//! have them. Each script goes out pipelined with `WAIT`
//! ([`Node::confirmed`]) on a connection kept for it, since `WAIT` holds
//! its connection until the replicas answer.
//!
//! A renewal is confirmed like a grant: a master that fails over to a
//! replica which missed the renewal hands the lock out again at the
//! deadline that replica has, the last confirmed one, so that is as long
//! as the lease may count on.

use std::time::Duration;

use lock_core::backend::{AcquireRequest, Lease};
use lock_core::{Error, FencingToken, LockName, Result};

use crate::group::Joining;
use crate::node::{Node, mutex_like};

/// The connections that confirmed writes go out on.
#[derive(Debug)]
pub(crate) struct Confirmed {
    /// Grants, and attempts that find the lock held (their waiting mark
    /// is a write too).
    grants: Node,
    /// Renewals and `extend`s, apart from the grants: keeping a lease
    /// alive never queues behind waiters' attempts, each of which holds
    /// its connection until the replicas answer.
    renewals: Node,
    /// How many replicas must have each write.
    replicas: u32,
    /// How long they have.
    wait_timeout: Duration,
}

impl Confirmed {
    /// Opens the connections, to the server `node` is on, for grants
    /// that `replicas` replicas must have within `timeout`.
    pub(crate) async fn open(node: &Node, replicas: u32, timeout: Duration) -> Result<Self> {
        Ok(Self {
            grants: node.with_own_connection(timeout).await?,
            renewals: node.with_own_connection(timeout).await?,
            replicas,
            wait_timeout: timeout,
        })
    }

    fn args(&self) -> (u32, Duration) {
        (self.replicas, self.wait_timeout)
    }

    /// Grants `req` and waits for the replicas to have the grant: its
    /// token, or `None` if somebody else holds the lock. A grant they do
    /// not confirm in time is `Error::Unavailable`; it was made on the
    /// master all the same, and the caller gives it back.
    pub(crate) async fn grant(&self, req: &AcquireRequest) -> Result<Option<FencingToken>> {
        let node = &self.grants;
        let invocation = if mutex_like(req.kind) {
            node.acquire_invocation(req)
        } else {
            // Not admittable: a grant made by somebody else's release
            // would not be confirmed on the replicas.
            node.join_invocation(req, Joining::Unadmitted)
        };
        let (token, confirmed): (u64, u32) =
            node.confirmed(&invocation, self.args(), "acquire").await?;
        if token == 0 {
            return Ok(None);
        }
        self.check(confirmed, "grant", &req.name, "it was given back")?;
        Ok(Some(FencingToken::new(token)))
    }

    /// Renews `lease` for `ttl` and waits for the replicas to have the
    /// renewal: `true` once they do, `false` if the lease is not held. A
    /// renewal they do not confirm in time is `Error::Unavailable`, which
    /// a keep-alive retries: the master has the new expiry, but a replica
    /// promoted now would not, so the lease keeps its earlier deadline.
    pub(crate) async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        let node = &self.renewals;
        let invocation = if mutex_like(lease.kind()) {
            node.renew_invocation(lease, ttl)
        } else {
            node.renew_member_invocation(lease, Some(lease.token()), ttl)
        };
        let (done, confirmed): (i64, u32) =
            node.confirmed(&invocation, self.args(), "renew").await?;
        if done != 1 {
            return Ok(false);
        }
        self.check(
            confirmed,
            "renewal",
            lease.name(),
            "the lease keeps its earlier deadline",
        )?;
        Ok(true)
    }

    /// `Error::Unavailable` unless `confirmed` replicas are enough.
    fn check(&self, confirmed: u32, what: &str, name: &LockName, outcome: &str) -> Result<()> {
        if confirmed >= self.replicas {
            return Ok(());
        }
        Err(Error::unavailable(
            crate::NAME,
            format!(
                "the {what} of lock \"{name}\" reached too few replicas within {:?} ({} needed, {confirmed} confirmed); {outcome}",
                self.wait_timeout, self.replicas
            ),
        ))
    }
}
