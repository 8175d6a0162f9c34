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

    /// The name of a companion of this table (its holders, its groups):
    /// `<table>_<suffix>`, or, when that would pass the 63 characters every
    /// supported database takes, the table's name cut short and a hash of
    /// all of it, so two long names that share a beginning still get
    /// different companions.
    pub(crate) fn companion(&self, suffix: &str) -> String {
        const MAX: usize = 63;
        let whole = format!("{}_{suffix}", self.0);
        if whole.len() <= MAX {
            return whole;
        }
        // FNV-1a: stable across builds and versions, unlike std's hasher.
        let hash = self.0.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let tail = format!("_{:08x}_{suffix}", hash as u32);
        // ASCII only, so any byte index is a character boundary.
        format!("{}{tail}", &self.0[..MAX - tail.len()])
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

    #[test]
    fn companions_fit_and_stay_apart() {
        let short = TableName::new("locks", "").unwrap();
        assert_eq!(short.companion("holders"), "locks_holders");
        let a = TableName::new(&format!("{}a", "x".repeat(62)), "").unwrap();
        let b = TableName::new(&format!("{}b", "x".repeat(62)), "").unwrap();
        let (ha, hb) = (a.companion("holders"), b.companion("holders"));
        assert!(ha.len() <= 63 && hb.len() <= 63, "{ha} {hb}");
        assert_ne!(ha, hb);
        assert!(ha.ends_with("_holders"), "{ha}");
        assert!(TableName::new(&ha, "").is_ok());
    }
}
