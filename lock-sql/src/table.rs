//! The name of the locks table, checked so it can be spliced into SQL.

use lock_core::{Error, Result};

/// The table holding one row per lock name. Defaults to `distlock_locks`, a
/// name unlikely to collide with an application's own tables.
///
/// Only `[A-Za-z_][A-Za-z0-9_]*` up to 63 characters is accepted: SQL
/// statements cannot bind a table name as a parameter, so the name is spliced
/// into the statement text, and this alphabet needs no quoting on any of the
/// supported databases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableName(String);

impl TableName {
    /// The default table name.
    pub const DEFAULT: &'static str = "distlock_locks";

    /// Validates `name`; `url` is only used in the error message.
    pub fn new(name: &str, url: &str) -> Result<Self> {
        let valid_start = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        let valid_rest = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !(valid_start && valid_rest) || name.len() > 63 {
            return Err(Error::invalid_url(
                url,
                format!(
                    "table name \"{}\" is not accepted; use 1 to 63 ASCII letters, digits or '_', not starting with a digit",
                    name.escape_debug()
                ),
            ));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name, ready to splice into SQL.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for TableName {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_identifiers() {
        assert!(TableName::new("locks", "").is_ok());
        assert!(TableName::new("_l2", "").is_ok());
        for bad in ["", "2x", "a-b", "a;drop table x", "a b", &"x".repeat(64)] {
            assert!(TableName::new(bad, "").is_err(), "{bad}");
        }
    }
}
