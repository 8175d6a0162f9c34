//! What a waiter registers for a hand-over and what the hand-over brings
//! it: the registry's types. The session keeps the registry, and the
//! hand-over's requests (`handover.rs`) need the session, so they live
//! apart.

use lock_core::backend::Handovers;
use tokio::time::Instant;

use crate::node::Node;

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
/// write that vouches for it was sent, and, for a semaphore's acquirer, its
/// lease node with a listing of the leases that the same write vouches for
/// (a node the hand-over made, or the acquirer's own, listed again by a
/// release); `None` for a turn the waiter found by itself.
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) sent: Instant,
    pub(crate) lease: Option<Node>,
}

/// Waiters by the path of the node each watches.
pub(crate) type ZkHandovers = Handovers<Waiter, Granted>;
