//! [`MemcacheBackend`]: `add` to acquire, compare-and-set to renew,
//! compare-and-delete to release.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::backend::{
    AcquireRequest, Family, Holder, Leader, Lease, LockBackend, ReleaseSignals, WaitBudget, Waking,
    async_trait, poll_acquire,
};
use lock_core::{Capabilities, Error, Fencing, FencingToken, LockKind, LockName, Result};
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::MemcacheConfig;
use crate::ballot::owner_of;
use crate::meta::{Item, MetaClient, Write};
use crate::place::{CLOCK_LAG, Place};

/// The shortest TTL a guard can keep: its lease, two seconds short of the
/// TTL (memcached's clock can lag by two), must outlast the third of the
/// TTL after which the keep-alive renews it (TTL − 2 s > TTL / 3, so over
/// 3 s), in whole seconds, as memcached counts them. At 4 s the lease is
/// about 1.96 s and renewals come every 1.33 s.
pub const MIN_TTL: Duration = Duration::from_secs(4);

/// Past 30 days memcached reads an expiry as an absolute Unix time; well
/// below that, the default maximum of a day applies.
/// Semaphores are one mutex per permit (`semaphore.rs`), an election is a
/// mutex of its own keys (`election.rs`); read-write locks are not kept
/// (see the README).
const CAPABILITIES: Capabilities = Capabilities::new(crate::NAME, Fencing::BestEffort)
    .with_ttl_range(MIN_TTL, Capabilities::DEFAULT_MAX_TTL)
    .with_semaphores(true)
    .with_elections(true);

/// A lock backend on one memcached (see the crate docs).
#[derive(Debug)]
pub struct MemcacheBackend {
    pub(crate) client: MetaClient,
    prefix: String,
    /// Wake-ups of the mutexes' waiters, of the semaphores' and of the
    /// elections' candidates: a release of one family never wakes another
    /// family's waiters of the same name.
    signals: ReleaseSignals,
    permit_signals: ReleaseSignals,
    candidate_signals: ReleaseSignals,
    /// Wake-ups of the elections' observers in this process, on every
    /// change made here (a new leader, a proclaim, a resign): apart from
    /// the candidates', whom a change other than a release would only
    /// send to a refused add that burns a token.
    pub(crate) observers: ReleaseSignals,
}

impl MemcacheBackend {
    /// Reaches the memcached a `memcache://host:port[?options]` URL names.
    /// Connections are made on first use; this checks the server answers.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(MemcacheConfig::from_url(url)?).await
    }

    /// Reaches the memcached `config` names; see [`connect`](Self::connect).
    pub async fn connect_with(config: MemcacheConfig) -> Result<Self> {
        config.check()?;
        let MemcacheConfig {
            addr,
            prefix,
            timeout,
            connect_timeout,
            pool_size,
            tls,
        } = config;
        let tls = match tls.load(crate::NAME)? {
            Some(material) => Some(TlsConnector::from(material.client_config()?)),
            None => None,
        };
        let backend = Self {
            client: MetaClient::new(addr, tls, pool_size, timeout, connect_timeout),
            prefix,
            signals: ReleaseSignals::new(),
            permit_signals: ReleaseSignals::new(),
            candidate_signals: ReleaseSignals::new(),
            observers: ReleaseSignals::new(),
        };
        backend
            .client
            .get(&format!("{}distlock-ping", backend.prefix))
            .await?;
        Ok(backend)
    }

    /// The meta-protocol client, for tests that replay an interleaving
    /// (feature `raw`).
    #[cfg(feature = "raw")]
    #[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
    pub fn client(&self) -> &MetaClient {
        &self.client
    }

    /// The key holding `name`'s owner token (feature `raw`).
    #[cfg(feature = "raw")]
    #[cfg_attr(docsrs, doc(cfg(feature = "raw")))]
    pub fn lock_key(&self, name: &LockName) -> String {
        self.key(name)
    }

    /// The key holding `name`'s owner token.
    fn key(&self, name: &LockName) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Where `name`'s mutex lives; its fence counter is `…#fence` (`#` is
    /// not allowed in lock names).
    fn mutex(&self, name: &LockName) -> Place {
        Place {
            key: self.key(name),
            fence: format!("{}{name}#fence", self.prefix),
            slot: None,
            election: false,
        }
    }

    /// Slot `slot` of `name`'s semaphore: `…#sem#<slot>`, with one fence
    /// counter for all the slots, `…#sem#fence`. Neither can be a mutex's
    /// key or fence, whose names have no `#`.
    pub(crate) fn slot(&self, name: &LockName, slot: u32) -> Place {
        Place {
            key: format!("{}{name}#sem#{slot}", self.prefix),
            fence: format!("{}{name}#sem#fence", self.prefix),
            slot: Some(slot),
            election: false,
        }
    }

    /// Where `name`'s election lives: `…#elect`, fence `…#elect#fence`,
    /// apart from the mutex's and the semaphore's keys of `name` as theirs
    /// are from each other.
    pub(crate) fn election(&self, name: &LockName) -> Place {
        Place {
            key: format!("{}{name}#elect", self.prefix),
            fence: format!("{}{name}#elect#fence", self.prefix),
            slot: None,
            election: true,
        }
    }

    /// Where `name`'s lock of `kind` lives, for a kind that has one item
    /// (the mutex, the election); a semaphore's grants have a slot each.
    fn single(&self, name: &LockName, kind: LockKind) -> Place {
        match kind.family() {
            Family::Election => self.election(name),
            _ => self.mutex(name),
        }
    }

    /// Where `lease`'s grant lives; `None` for a permit's lease that names
    /// no slot of its semaphore, which this backend never grants.
    fn place_of(&self, lease: &Lease) -> Result<Option<Place>> {
        Ok(match permits(lease.kind())? {
            None => Some(self.single(lease.name(), lease.kind())),
            Some(permits) => lease
                .slot()
                .filter(|&slot| slot < permits)
                .map(|slot| self.slot(lease.name(), slot)),
        })
    }

    /// The in-process wake-ups of `kind`'s family.
    pub(crate) fn signals(&self, kind: LockKind) -> &ReleaseSignals {
        match kind.family() {
            Family::Semaphore => &self.permit_signals,
            Family::Election => &self.candidate_signals,
            _ => &self.signals,
        }
    }

    /// Tells this process's waiters of `kind`'s `name` that a grant of it
    /// may have ended: one waiter, as for the mutex, and an election's
    /// observers.
    fn released(&self, kind: LockKind, name: &LockName) {
        self.signals(kind).notify(name);
        if kind.family() == Family::Election {
            self.observers.notify_all(name);
        }
    }

    /// The next fencing token of the counter at `fence`, seeded from the
    /// clock whenever it is missing (see [`seed`]).
    async fn next_token(&self, fence: &str) -> Result<FencingToken> {
        Ok(FencingToken::new(
            self.client.increment_or_seed(fence, seed()).await?,
        ))
    }

    /// Adds `req`'s owner at `place` if the key is free, drawing a token
    /// right behind the add. If the key already holds `req`'s owner, an
    /// earlier attempt of it was granted there: that grant is taken again.
    pub(crate) async fn add_at(
        &self,
        req: &AcquireRequest,
        place: &Place,
        sent: Instant,
    ) -> Result<Option<Lease>> {
        // The read tells whether a refusal found our own item.
        let (added, token, mut read) = self.add_reading(req, place, &[&place.key]).await?;
        if let Write::Applied(cas) = added {
            return Ok(Some(place.lease(req, token, cas, sent)));
        }
        match read
            .pop()
            .flatten()
            .filter(|i| owner_of(&i.value) == req.owner.to_hex())
        {
            Some(item) => self.take_again(req, place, item.cas, sent).await,
            None => Ok(None),
        }
    }

    /// The add of [`add_at`](Self::add_at), its token, and the items at
    /// `reads` as they were right behind both, in one round trip.
    pub(crate) async fn add_reading(
        &self,
        req: &AcquireRequest,
        place: &Place,
        reads: &[&str],
    ) -> Result<(Write, FencingToken, Vec<Option<Item>>)> {
        // The counter is incremented right behind the add on the same
        // connection, so after the grant and before anybody else can be
        // granted: tokens follow grants. (Ahead of the add, another
        // connection's grant could come in between and draw a larger token
        // than ours.) A refused add burns a token.
        let (added, token, read) = self
            .client
            .add_then_increment_reading(
                &place.key,
                &place.record(req),
                exptime(req.ttl),
                &place.fence,
                seed(),
                reads,
            )
            .await?;
        Ok((added, FencingToken::new(token), read))
    }

    /// Takes again the grant `req`'s owner holds at `place`, whose item an
    /// earlier attempt added and whose reply (or its token's) was lost. Its
    /// expiry runs from that attempt, and it may never have drawn a token,
    /// so the counter may still hold the previous holder's: the expiry is
    /// renewed from this send (on `cas`, the item as just read), and a
    /// token drawn after that, as a fresh grant does.
    pub(crate) async fn take_again(
        &self,
        req: &AcquireRequest,
        place: &Place,
        cas: u64,
        sent: Instant,
    ) -> Result<Option<Lease>> {
        let owner = req.owner.to_hex();
        let record = place.record(req);
        let Some(cas) = self
            .extend_if_owner(&place.key, &owner, Some(cas), Some(&record), req.ttl)
            .await?
        else {
            return Ok(None);
        };
        let token = self.next_token(&place.fence).await?;
        Ok(Some(place.lease(req, token, cas, sent)))
    }

    async fn current_token(&self, name: &LockName) -> Result<FencingToken> {
        let item = self.client.get(&self.mutex(name).fence).await?;
        Ok(FencingToken::new(
            item.and_then(|i| i.value.trim().parse().ok()).unwrap_or(0),
        ))
    }
}

/// The permit count of a semaphore's `kind`, `None` for the mutex; a kind
/// this backend does not keep (a read-write lock's sides), or a bad permit
/// count, is refused before any I/O.
pub(crate) fn permits(kind: LockKind) -> Result<Option<u32>> {
    CAPABILITIES.check_kind(kind)?;
    Ok(match kind {
        LockKind::Permit { permits } => Some(permits),
        _ => None,
    })
}

/// The CAS of our last write of `lease`'s item, while the lease is in force.
///
/// memcached's CAS values come from one counter per server run, so while the
/// item is there a CAS names one write of it, ours. After the deadline the
/// item may have expired and the key been taken again, and memcached counts
/// CAS values from 1 again after a restart: an old CAS could then name
/// another owner's item, so a late release reads the owner first.
fn known_cas(lease: &Lease) -> Option<u64> {
    lease.version().filter(|_| !lease.is_expired())
}

/// The value a missing fence counter is created with: the clock in
/// microseconds, so the counter never goes back while clocks do not.
fn seed() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_micros()).unwrap_or(u64::MAX)
}

/// Whole seconds, rounded up.
pub(crate) fn exptime(ttl: Duration) -> u64 {
    ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)
}

#[async_trait]
impl LockBackend for MemcacheBackend {
    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        let sent = Instant::now();
        match permits(req.kind)? {
            None if req.kind.family() == Family::Election => self.try_lead(req, sent).await,
            None => self.add_at(req, &self.mutex(&req.name), sent).await,
            Some(permits) => self.try_permit(req, permits, sent).await,
        }
    }

    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        poll_acquire(self, req, budget, Waking::signalled(self.signals(req.kind))).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        // The lease counts from before the first request, even when a later
        // try's write is the one that applied: every write is sent after
        // this instant, so the lease never outlasts the expiry it set.
        let sent = Instant::now();
        let Some(place) = self.place_of(lease)? else {
            return Err(Error::not_held(lease.name()));
        };
        let owner = lease.owner().to_hex();
        let kept = place.kept(&owner);
        match self
            .extend_if_owner(&place.key, &owner, known_cas(lease), kept.as_deref(), ttl)
            .await?
        {
            // The new expiry is set on the same lagging clock.
            Some(cas) => Ok(lease
                .renewed(ttl, sent)
                .with_early_expiry(CLOCK_LAG)
                .with_version(cas)),
            None => Err(Error::not_held(lease.name())),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<()> {
        let Some(place) = self.place_of(lease)? else {
            return Err(Error::not_held(lease.name()));
        };
        let deleted = self
            .delete_if_owner(&place.key, &lease.owner().to_hex(), known_cas(lease))
            .await?;
        self.released(lease.kind(), lease.name());
        if deleted {
            Ok(())
        } else {
            Err(Error::not_held(lease.name()))
        }
    }

    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        match permits(req.kind)? {
            None => {
                let key = self.single(&req.name, req.kind).key;
                self.delete_if_owner(&key, &req.owner.to_hex(), None)
                    .await?;
            }
            Some(permits) => self.abandon_permits(req, permits).await?,
        }
        self.released(req.kind, &req.name);
        Ok(())
    }

    /// The grant's item is there, unexpired, with our owner as its value
    /// (and, for an election, our term).
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        let Some(place) = self.place_of(lease)? else {
            return Ok(false);
        };
        let item = self.client.get(&place.key).await?;
        Ok(item.is_some_and(|item| place.holds(&item, lease)))
    }

    async fn holders(&self, name: &LockName, kind: LockKind) -> Result<Vec<Holder>> {
        match kind.family() {
            Family::Mutex => {}
            Family::Election => return self.election_holders(name).await,
            _ => return self.group_holders(name, kind).await,
        }
        let Some(item) = self.client.get(&self.key(name)).await? else {
            return Ok(Vec::new());
        };
        let token = self.current_token(name).await?;
        let left = item.ttl.map(Duration::from_secs);
        Ok(vec![Holder::new(&item.value, token, left)])
    }

    async fn proclaim(&self, lease: &Lease, value: &str) -> Result<()> {
        self.proclaim_at(lease, value).await
    }

    async fn leader(&self, name: &LockName) -> Result<Option<Leader>> {
        self.read_leader(name).await
    }

    async fn leader_changed(
        &self,
        name: &LockName,
        seen: Option<&Leader>,
        within: Duration,
    ) -> Result<()> {
        self.leader_change(name, seen, within).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease_for(ttl: Duration, sent: Instant) -> Lease {
        let place = Place {
            key: "k".into(),
            fence: "k#fence".into(),
            slot: None,
            election: false,
        };
        let req = AcquireRequest::new(LockName::new("k").expect("name"), ttl);
        place.lease(&req, FencingToken::new(1), 1, sent)
    }

    /// A guard renews a third of the TTL after the send; at the shortest
    /// TTL the lease, two seconds short of it, still runs long after that
    /// (room for the renewal's round trip and a retry), and a second less
    /// would end before the first renewal is due.
    #[test]
    fn the_shortest_lease_outlasts_its_first_renewal() {
        let sent = Instant::now();
        let left = |ttl: Duration| lease_for(ttl, sent).deadline() - sent;
        assert!(left(MIN_TTL) > MIN_TTL / 3 + Duration::from_millis(500));
        let shorter = MIN_TTL - Duration::from_secs(1);
        assert!(left(shorter) < shorter / 3, "{:?}", left(shorter));
        assert!(CAPABILITIES.check_ttl(shorter).is_err());
    }
}
