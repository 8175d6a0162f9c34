//! What tells our key from anybody else's, so that the deletes of a
//! waiter that gives up, of an orphan and of an expired grant touch ours
//! only, even if two owner tokens ever shared the 63 bits a key is named
//! by.

use etcd_client::{Compare, CompareOp};
use lock_core::LockKind;
use lock_core::backend::AcquireRequest;

/// How a key is known to be ours. `Debug` shows the first 8 hex digits of
/// an owner token only.
#[derive(Clone)]
pub(crate) enum Mark {
    /// A queue entry: its value, the owner token.
    Owner(String),
    /// A grant: its create revision, the fencing token.
    Token(i64),
    /// An election candidate's key, whose value is what it proclaims: its
    /// name ends in the whole owner token, so a key of that name is ours.
    Named,
}

impl Mark {
    /// What marks the keys an acquire of `req` puts.
    pub(crate) fn of(req: &AcquireRequest) -> Self {
        match req.kind {
            LockKind::Leader => Self::Named,
            _ => Self::Owner(req.owner.to_hex()),
        }
    }

    /// What holds of `key` as long as it is ours.
    pub(crate) fn compare(&self, key: &str) -> Compare {
        match self {
            Self::Owner(owner) => Compare::value(key, CompareOp::Equal, owner.as_str()),
            Self::Token(token) => Compare::create_revision(key, CompareOp::Equal, *token),
            Self::Named => Compare::version(key, CompareOp::Greater, 0),
        }
    }

    /// Whether a key found where ours goes, holding `value`, is ours (put
    /// by an earlier attempt of the same acquire).
    pub(crate) fn owns(&self, value: &[u8]) -> bool {
        match self {
            Self::Owner(owner) => value == owner.as_bytes(),
            Self::Token(_) | Self::Named => true,
        }
    }
}

impl std::fmt::Debug for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Owner(owner) => write!(f, "Owner({}…)", owner.get(..8).unwrap_or(owner)),
            Self::Token(token) => write!(f, "Token({token})"),
            Self::Named => f.write_str("Named"),
        }
    }
}
