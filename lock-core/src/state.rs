//! How safe it is to act under a held lock: the state a guard's renewal
//! sets and its users watch.

/// How safe it is to act under a lock right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LockState {
    /// The last renewal succeeded and the lease has not run out.
    Held,
    /// A renewal failed (the backend is slow or unreachable) but the lease's
    /// deadline has not passed: the lock is still ours for
    /// [`Lease::remaining`](crate::Lease::remaining), and renewal keeps trying. Finish or checkpoint
    /// quickly.
    AtRisk,
    /// The lease ran out or another owner has the lock. Stop acting under it:
    /// anything done from now on may overlap with the next holder. Final.
    Lost,
}
