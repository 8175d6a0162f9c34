//! A backend's own counters, apart from the trait that reports them so
//! that the helpers filling them in need not name it.

/// A backend's own counters, as `LockBackend::stats` reports them. Each is
/// a running total; take differences between two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendStats {
    /// Wake-ups: times a waiter was woken by the server — a watch, a
    /// notification, a pub/sub message — rather than by its own poll (or, on
    /// backends without server-side wake-ups, by a release in this process).
    pub wakeups: u64,
}

impl BackendStats {
    /// Counters with `wakeups` set (for backends filling them in).
    pub const fn with_wakeups(mut self, wakeups: u64) -> Self {
        self.wakeups = wakeups;
        self
    }
}
