//! The two tokens a lease carries: who owns it, and where it stands in the
//! order of grants.

use std::fmt;

use crate::error::{Error, Result};

/// A fencing token: strictly greater for every later grant of the same lock
/// name, on backends whose [`Fencing`](crate::Fencing) is `Strict`.
///
/// Hand it to the protected resource with every write; the resource remembers
/// the greatest token it has seen and rejects smaller ones, so a holder that
/// paused past its lease cannot overwrite the work of the next holder.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FencingToken(u64);

impl FencingToken {
    /// A token from a backend's counter.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The token as a number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A token from a signed counter (a SQL `BIGINT`, an etcd revision, a
    /// ZooKeeper zxid); those never go below zero, and a negative value
    /// reads as 0, the token no grant has.
    pub fn from_i64(value: i64) -> Self {
        Self(u64::try_from(value).unwrap_or(0))
    }

    /// The token as a signed counter, for a column or field that stores it
    /// signed; saturates at `i64::MAX`, which no counter reaches.
    pub fn to_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The random identity of one acquisition: 128 bits read from the operating
/// system's CSPRNG (`getrandom(2)` on Linux) at every call, compared
/// atomically by the server on renew and release so that nobody but the
/// holder can extend or delete the lock.
///
/// No user-space generator sits in between: one seeded in a parent process
/// would hand the same tokens to every child a pre-fork server forks, and
/// two processes sharing an owner token can both be granted one lock.
///
/// Knowing a token lets a client release that lock, so `Debug` and `Display`
/// show only the first 8 hex digits, enough to match log lines. Backends store
/// the full form from [`OwnerToken::to_hex`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerToken(u128);

impl OwnerToken {
    /// A fresh, unguessable token, from the operating system's generator.
    ///
    /// # Panics
    ///
    /// If the operating system cannot supply random bytes (as std's
    /// `HashMap` seeding does): a guessable or repeated token would break
    /// ownership silently.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut bytes) {
            panic!("the operating system's random generator failed: {e}");
        }
        Self(u128::from_ne_bytes(bytes))
    }

    /// The full token as 32 lowercase hex digits, the form backends store.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// Parses the 32-hex-digit form written by [`OwnerToken::to_hex`].
    pub fn from_hex(hex: &str) -> Result<Self> {
        if hex.len() != 32 {
            return Err(Error::backend(format!(
                "stored owner token has {} characters, expected 32",
                hex.len()
            )));
        }
        u128::from_str_radix(hex, 16)
            .map(Self)
            .map_err(|_| Error::backend("stored owner token is not hexadecimal"))
    }

    /// The token's 128 bits, for backends that derive an identifier from it
    /// (an etcd lease ID, say).
    pub fn to_u128(self) -> u128 {
        self.0
    }

    /// The first 8 hex digits: safe to log, useful to tell holders apart.
    pub fn short(self) -> String {
        format!("{:08x}", self.0 >> 96)
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", self.short())
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_counters_convert_both_ways() {
        assert_eq!(FencingToken::from_i64(42).get(), 42);
        assert_eq!(FencingToken::from_i64(-1).get(), 0);
        assert_eq!(FencingToken::new(7).to_i64(), 7);
        assert_eq!(FencingToken::new(u64::MAX).to_i64(), i64::MAX);
        assert_eq!(u64::from(FencingToken::new(9)), 9);
    }

    #[test]
    fn hex_round_trips_and_is_fixed_width() {
        let t = OwnerToken::random();
        let hex = t.to_hex();
        assert_eq!(hex.len(), 32);
        assert_eq!(OwnerToken::from_hex(&hex).unwrap(), t);
        assert_eq!(OwnerToken(1).to_hex(), format!("{:032x}", 1));
    }

    #[test]
    fn formatting_never_shows_the_whole_token() {
        let t = OwnerToken::random();
        let hex = t.to_hex();
        for shown in [format!("{t:?}"), t.to_string()] {
            assert!(!shown.contains(&hex), "{shown}");
            assert!(shown.contains(&hex[..8]), "{shown}");
        }
    }

    #[test]
    fn tokens_differ() {
        assert_ne!(OwnerToken::random(), OwnerToken::random());
    }

    #[test]
    fn malformed_hex_is_an_error() {
        assert!(OwnerToken::from_hex("xyz").is_err());
        assert!(OwnerToken::from_hex(&"g".repeat(32)).is_err());
    }
}
