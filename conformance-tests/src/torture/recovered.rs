//! A nemesis that strikes only a service that came back from its last
//! fault.

use std::time::Duration;

use distlock_torture::{Nemesis, Run};
use lock_core::backend::async_trait;

/// Wraps a nemesis whose fault takes longer to heal than the quiet time
/// between faults (a server restarted on its data, a member rejoining a
/// cluster): each fault after the first waits, at most `patience`, until a
/// worker was granted the lock after the last heal, so that every fault
/// strikes a service that recovered from the one before instead of one
/// still coming back. The heal itself does not wait: the time to come back
/// is what the recovery figure measures.
pub struct Recovered<N> {
    /// The fault.
    pub nemesis: N,
    /// The longest wait for a grant before striking anyway.
    pub patience: Duration,
}

#[async_trait]
impl<N: Nemesis> Nemesis for Recovered<N> {
    fn label(&self) -> String {
        self.nemesis.label()
    }
    async fn inject(&mut self, run: &Run) -> std::io::Result<()> {
        let deadline = tokio::time::Instant::now() + self.patience;
        while !run.granted_since_heal() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.nemesis.inject(run).await
    }
    async fn heal(&mut self, run: &Run) -> std::io::Result<()> {
        self.nemesis.heal(run).await
    }
}
