//! What a waiter registers for a hand-over and what the hand-over brings
//! it: the registry's types. The session keeps the registry, and the
//! hand-over's requests (`handover.rs`) need the session, so they live
//! apart.

use lock_core::backend::Handovers;
use tokio::time::Instant;

use crate::node::{Node, Vouched};

/// What a release checks of the waiter behind it.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) session: i64,
    pub(crate) path: String,
    pub(crate) czxid: i64,
    /// For a waiter in a semaphore's mutex: the lease node it makes once it
    /// holds the mutex.
    pub(crate) lease: Option<LeaseToMake>,
}

/// A semaphore acquirer's lease node, not made yet.
#[derive(Clone, Debug)]
pub(crate) struct LeaseToMake {
    /// The leases' parent.
    pub(crate) parent: String,
    /// The node's name before the server appends the sequence number.
    pub(crate) prefix: String,
    pub(crate) data: Vec<u8>,
}

/// What a hand-over grants, and what a wait for a turn ends with: when the
/// write that vouches for it was sent, and, for a semaphore's acquirer, the
/// lease node a hand-over made for it, with a listing of the leases that
/// the same write vouches for; `None` for a turn the waiter found by
/// itself.
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) sent: Instant,
    pub(crate) lease: Option<Node>,
}

/// What a release of this backend hands a waiter of the node (or the
/// parent) it deletes.
#[derive(Debug)]
pub(crate) enum Handed {
    /// The turn itself.
    Turn(Granted),
    /// A listing of the parent, sent behind the release's delete, which
    /// vouches for it as the waiter's own check would: the waiter reads it
    /// as its own (read-write locks, a semaphore's leases).
    Listing(Vouched),
}

/// Waiters by the path of the node (or parent) each watches.
pub(crate) type ZkHandovers = Handovers<Waiter, Handed>;
