//! Our node in a lock's queue, and the listing of its parent that a write
//! of our session vouches for.

use tokio::time::Instant;

/// The version a check or write accepts whatever the node's version.
pub(crate) const ANY_VERSION: i32 = -1;

/// Our node in a lock's queue.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) czxid: i64,
    /// The listing of the parent sent right behind the create that made
    /// the node, with when that create was sent, until it is used; `None`
    /// for a node found again, or if that listing failed.
    pub(crate) vouched: Option<Vouched>,
}

impl Node {
    /// The node as kept for a later attempt: without a listing, which
    /// vouches only for the attempt it came to, and would date a later
    /// grant from its send.
    pub(crate) fn for_later(&self) -> Node {
        Node {
            vouched: None,
            ..self.clone()
        }
    }
}

/// A listing of a lock's parent answered after a write of our session that
/// the leader committed (our create, or a check of our node) was applied.
#[derive(Clone, Debug)]
pub(crate) struct Vouched {
    /// When that write was sent.
    pub(crate) sent: Instant,
    pub(crate) children: Vec<String>,
}
