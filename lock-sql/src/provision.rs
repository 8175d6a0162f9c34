//! What a backend keeps in its database, made at start or, with
//! `create_tables=false`, only looked for: a role granted the use of the
//! tables and nothing more cannot create them, and must be told what an
//! administrator has to run when they are not there.

use lock_core::{Error, Result};

/// Nothing, if nothing is `lacking`; else the error of a backend that may
/// not create what it needs, naming what is missing, with `script`: every
/// statement that makes it all (idempotent, so an administrator can run
/// the whole of it).
pub(crate) fn require(
    backend: &'static str,
    lacking: &[String],
    script: impl FnOnce() -> Vec<String>,
) -> Result<()> {
    if lacking.is_empty() {
        return Ok(());
    }
    let script = script();
    Err(Error::invalid_config(
        backend,
        format!(
            "create_tables=false, and the database lacks {}. An administrator can make it by \
             connecting once with create_tables=true, or by running:\n\n{};\n\nthen grant the \
             application's user the rights lock-sql's README lists under \"Least privilege\"",
            lacking.join(", "),
            script.join(";\n\n"),
        ),
    ))
}
