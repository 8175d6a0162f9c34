//! The failover part of the election workload: leaders that die without
//! resigning, and how long their standbys take to lead. Their leases must
//! run out first, so each sample takes about a TTL; the samples of one
//! contender are taken at once, each in an election of its own, so the part
//! costs one TTL per contender whatever their number.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use distlock::Result;

use super::clients::{Tally, clients};
use crate::cli::bench::contender::Contender;
use crate::cli::bench::stats::Samples;

/// Leaders that die, per contender.
pub(crate) const FAILOVERS: usize = 5;

/// The lease a dying leader holds, unless the backend's shortest TTL is
/// longer: short, so that the part stays short, and the failover it bounds
/// reads as TTL plus the time the backend takes to notice.
pub(crate) const DYING_TTL: Duration = Duration::from_secs(1);

/// How long past the dying lease's TTL (twice over) a standby waits before
/// the sample counts as missed: generous, only there so a run always ends.
const GRACE: Duration = Duration::from_secs(5);

/// What the standbys of one contender measured.
pub(super) struct Failovers {
    pub(super) samples: Samples,
    /// The TTL the dying leases were granted with.
    pub(super) ttl: Duration,
}

/// A leader of `contender` in each election of `names`, all at once, takes
/// the lead on a lease of `ttl` that nothing renews or releases (a leader
/// killed on the spot), and a standby campaigns in each election right
/// after. Each sample runs from the call that took the dying lease (its TTL
/// cannot start before it) to the standby's campaign returning: the TTL,
/// the lease's round trip, and the backend's detection of the expiry.
/// `None` where the contender cannot leave a lease to expire (see
/// [`Contender::abandoned_lead`]).
pub(super) async fn dying_leaders(
    contender: &Arc<dyn Contender>,
    names: Vec<String>,
    ttl: Duration,
) -> Result<Option<Failovers>> {
    let kept: Arc<OnceLock<Duration>> = Arc::default();
    let tallies = names.iter().map(|_| Tally::default()).collect();
    let tallies = clients(tallies, |i, mut tally| {
        let (c, kept, name) = (contender.clone(), kept.clone(), names[i].clone());
        async move {
            let died = Instant::now();
            let Some(granted) = c.abandoned_lead(&name, ttl, died + GRACE).await? else {
                return Ok(tally);
            };
            let _ = kept.set(granted);
            let until = died + 2 * granted + GRACE;
            if let Some(leading) = c.campaign(&name, until).await? {
                tally.latencies.record(died.elapsed());
                tally.acquisitions += 1;
                leading.release().await?;
            }
            Ok(tally)
        }
    })
    .await?;
    let Some(ttl) = kept.get().copied() else {
        return Ok(None);
    };
    let mut samples = Samples::new();
    for t in &tallies {
        samples.merge(&t.latencies);
    }
    Ok(Some(Failovers { samples, ttl }))
}
