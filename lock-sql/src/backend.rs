//! [`SqlBackend`]: the lock protocol over any [`Driver`].

use std::fmt;
use std::future::Future;
use std::time::Duration;

use lock_core::wait::{ReleaseSignals, poll_acquire};
use lock_core::{
    AcquireRequest, Capabilities, Error, FencingToken, Holder, Lease, LockBackend, LockName,
    OwnerToken, Result, WaitBudget, async_trait,
};
use tokio::time::Instant;

use crate::driver::{Driver, Released};

/// A lock backend on a SQL database: one row per lock name with an owner, a
/// version and an expiry time set by the database's clock.
///
/// - **acquire** is one `INSERT … ON CONFLICT DO UPDATE … WHERE` statement that
///   takes the row only if it is free or expired, and bumps the version;
/// - **renew** and **release** compare both the owner and the version;
/// - **fencing token** = the version. Release keeps the row, so the version
///   never goes backwards for a name.
///
/// Waiters poll with jittered backoff; a release in the same process wakes a
/// local waiter at once.
pub struct SqlBackend {
    driver: Box<dyn Driver>,
    signals: ReleaseSignals,
    op_timeout: Duration,
}

impl SqlBackend {
    pub(crate) fn new(driver: impl Driver, op_timeout: Duration) -> Self {
        Self {
            driver: Box::new(driver),
            signals: ReleaseSignals::new(),
            op_timeout,
        }
    }

    /// Connects to the database a URL names. The schemes accepted depend on
    /// the features compiled in: `sqlite://` (feature `sqlite`).
    pub async fn connect(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or(url, |(s, _)| s);
        match scheme {
            #[cfg(feature = "sqlite")]
            "sqlite" => crate::sqlite::connect(url).await,
            _ => Err(Error::UnknownScheme {
                scheme: scheme.to_owned(),
                supported: crate::SCHEMES.to_vec(),
            }),
        }
    }

    /// Release notices sent to local waiters so far.
    pub fn wakeups(&self) -> u64 {
        self.signals.wakeups()
    }

    /// Runs one statement within the operation timeout.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        statement: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::time::timeout(self.op_timeout, statement)
            .await
            .unwrap_or(Err(Error::Timeout {
                operation,
                after: self.op_timeout,
            }))
    }
}

fn millis(ttl: Duration) -> i64 {
    // TTLs are bounded by the capabilities long before this could saturate.
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

fn not_held(name: &LockName) -> Error {
    Error::NotHeld {
        name: name.to_string(),
    }
}

#[async_trait]
impl LockBackend for SqlBackend {
    fn capabilities(&self) -> Capabilities {
        self.driver.capabilities()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let sent = Instant::now();
        let owner = req.owner.to_hex();
        let version = self
            .bounded(
                "acquire",
                self.driver
                    .acquire(req.name.as_str(), &owner, millis(req.ttl)),
            )
            .await?;
        Ok(
            version
                .map(|v| Lease::new(req.name.clone(), req.owner, FencingToken(v), req.ttl, sent)),
        )
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(self, req, budget, Some(&self.signals)).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let sent = Instant::now();
        let owner = lease.owner().to_hex();
        let renewed = self
            .bounded(
                "renew",
                self.driver.renew(
                    lease.name().as_str(),
                    &owner,
                    lease.token().get(),
                    millis(ttl),
                ),
            )
            .await?;
        if renewed {
            Ok(lease.renewed(ttl, sent))
        } else {
            Err(not_held(lease.name()))
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let owner = lease.owner().to_hex();
        let outcome = self
            .bounded(
                "release",
                self.driver
                    .release(lease.name().as_str(), &owner, lease.token().get()),
            )
            .await?;
        if outcome != Released::NotOurs {
            self.signals.notify(lease.name());
        }
        match outcome {
            Released::InTime => Ok(()),
            Released::Late | Released::NotOurs => Err(not_held(lease.name())),
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        let owner = req.owner.to_hex();
        self.bounded("abandon", self.driver.abandon(req.name.as_str(), &owner))
            .await?;
        self.signals.notify(&req.name);
        Ok(())
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        let row = self
            .bounded("holder", self.driver.holder(name.as_str()))
            .await?;
        row.map(|row| {
            Ok(Holder {
                owner: OwnerToken::from_hex(&row.owner)?.short(),
                token: FencingToken(row.version),
                expires_in: Some(row.remaining),
            })
        })
        .transpose()
    }
}

impl fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlBackend")
            .field("driver", &self.driver)
            .field("op_timeout", &self.op_timeout)
            .finish_non_exhaustive()
    }
}
