//! Who leads an election, as a backend reports it and an observer sees
//! it.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::token::FencingToken;

/// The leader of an election, as [`Election::leader`](crate::Election::leader) and
/// [`LeaderWatch::changed`](crate::LeaderWatch::changed) report it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader proclaims.
    pub value: String,
    /// The leader's term: its grant's fencing token, the same for the
    /// whole leadership, and strictly greater for every new leader where
    /// the backend's fencing is [`Strict`](crate::Fencing::Strict).
    pub term: FencingToken,
    /// The first hex digits of the leader's owner token (empty for a
    /// leader elected by another client, such as `etcdctl elect` or a
    /// Curator `LeaderLatch`, whose keys carry none).
    pub owner: String,
    /// Time left on the leader's lease by the server's clock, if known.
    pub expires_in: Option<Duration>,
}

impl Leader {
    /// The longest value a candidate may proclaim, in bytes: an identity
    /// (a host and port, a URL), not a payload.
    pub const MAX_VALUE: usize = 4096;

    /// A leader as a backend reads it; `owner` is cut to its first 8
    /// characters, as [`Holder::new`](crate::Holder::new) does.
    pub fn new(
        owner: &str,
        value: impl Into<String>,
        term: FencingToken,
        expires_in: Option<Duration>,
    ) -> Self {
        Self {
            value: value.into(),
            term,
            owner: owner.chars().take(8).collect(),
            expires_in,
        }
    }

    /// Checks a value to proclaim: at most [`MAX_VALUE`](Self::MAX_VALUE)
    /// bytes and no NUL character.
    pub fn check_value(value: &str) -> Result<()> {
        let reason = if value.len() > Self::MAX_VALUE {
            format!("at most {} bytes are allowed", Self::MAX_VALUE)
        } else if value.contains('\0') {
            "a NUL character is not allowed".to_owned()
        } else {
            return Ok(());
        };
        Err(Error::InvalidValue {
            len: value.len(),
            reason,
        })
    }

    /// Whether two reads of an election show the same state: nobody
    /// leading in both, or the same leadership (term and owner) with the
    /// same value. The time left, which changes with every read, is not
    /// compared: an observer reports a state once.
    pub fn unchanged(a: Option<&Leader>, b: Option<&Leader>) -> bool {
        match (a, b) {
            (Some(a), Some(b)) => a.term == b.term && a.value == b.value && a.owner == b.owner,
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}
