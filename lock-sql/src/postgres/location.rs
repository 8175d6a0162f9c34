//! Where the PostgreSQL backend's objects live: a schema, or the search
//! path.

use crate::table::TableName;

/// Where the locks table lives: `schema.table`, or `table` on the search path.
#[derive(Debug)]
pub(super) struct Location {
    pub(super) schema: Option<TableName>,
    pub(super) table: TableName,
}

impl Location {
    pub(super) fn qualified(&self) -> String {
        self.in_schema(self.table.as_str())
    }

    /// A companion of the locks table (its holders, its groups, the
    /// function that admits holders), in the same schema.
    pub(super) fn companion(&self, suffix: &str) -> String {
        self.in_schema(&self.table.companion(suffix))
    }

    fn in_schema(&self, object: &str) -> String {
        match &self.schema {
            Some(s) => format!("{}.{object}", s.as_str()),
            None => object.to_owned(),
        }
    }

    /// The notification channel. Channel names are cut at 63 bytes by the
    /// server; two tables sharing a channel only cost a spurious wake-up.
    pub(super) fn channel(&self) -> String {
        let mut channel = format!("distlock_{}", self.qualified());
        channel.truncate(63);
        channel
    }
}
