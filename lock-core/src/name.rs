//! Validated lock names.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The name of a lock: the thing every contender agrees on.
///
/// A valid name
/// - is 1 to [`LockName::MAX_LEN`] (128) bytes long,
/// - uses only ASCII letters, digits and the characters `-`, `_`, `.`, `:`,
/// - starts with a letter or a digit.
///
/// These rules keep a name usable unchanged as a Redis or memcache key, an
/// etcd key segment, a ZooKeeper node name and a SQL `VARCHAR(255)` value
/// after a backend adds its prefix. `/` is excluded on purpose: in etcd and
/// ZooKeeper it would nest one lock inside another (`a` and `a/b` would share a
/// key range), and whitespace or control characters break the memcache
/// protocol.
///
/// ```
/// use lock_core::LockName;
///
/// let name = LockName::new("billing:charge-42").unwrap();
/// assert_eq!(name.as_str(), "billing:charge-42");
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("a/b").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName(Box<str>);

impl LockName {
    /// The longest accepted name, in bytes.
    pub const MAX_LEN: usize = 128;

    /// Validates `name`, explaining what is wrong if it is not acceptable.
    pub fn new(name: impl AsRef<str>) -> Result<Self> {
        let name = name.as_ref();
        let invalid = |reason: String| Error::InvalidName {
            name: printable(name),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("a lock name must not be empty".into()));
        }
        if name.len() > Self::MAX_LEN {
            return Err(invalid(format!(
                "a lock name is at most {} bytes, this one is {}",
                Self::MAX_LEN,
                name.len()
            )));
        }
        if let Some(bad) = name.chars().find(|c| !is_name_char(*c)) {
            return Err(invalid(format!(
                "character {bad:?} is not allowed; use ASCII letters, digits, '-', '_', '.' or ':'"
            )));
        }
        if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(invalid(
                "a lock name must start with an ASCII letter or digit".into(),
            ));
        }
        Ok(Self(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')
}

/// A bounded, escaped copy of a rejected name, safe to put in an error message.
fn printable(name: &str) -> String {
    const SHOWN: usize = 40;
    let escaped: String = name
        .chars()
        .flat_map(char::escape_debug)
        .take(SHOWN)
        .collect();
    if escaped.len() < name.len() && name.chars().count() > SHOWN {
        format!("{escaped}…")
    } else {
        escaped
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for LockName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl TryFrom<String> for LockName {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in ["a", "A9", "job.nightly", "tenant:42:charge", "x_y-z", "1"] {
            assert_eq!(LockName::new(ok).unwrap().as_str(), ok);
        }
        assert!(LockName::new("a".repeat(LockName::MAX_LEN)).is_ok());
    }

    #[test]
    fn rejects_with_a_reason() {
        let cases = [
            ("", "empty"),
            ("a/b", "'/'"),
            ("a b", "' '"),
            ("é", "'é'"),
            ("-lead", "start with"),
            (".", "start with"),
            ("tab\there", "'\\t'"),
        ];
        for (bad, why) in cases {
            let err = LockName::new(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let long = LockName::new("a".repeat(LockName::MAX_LEN + 1)).unwrap_err();
        assert!(long.to_string().contains("at most 128 bytes"), "{long}");
    }

    #[test]
    fn error_quotes_long_names_briefly() {
        let err = LockName::new("x".repeat(10_000)).unwrap_err().to_string();
        assert!(err.len() < 200, "{err}");
    }
}
