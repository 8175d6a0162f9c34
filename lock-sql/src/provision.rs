//! What a backend keeps in its database, made at start or, with
//! `create_tables=false`, only looked for: a role granted the use of the
//! tables and nothing more cannot create them, and must be told what an
//! administrator has to run when they are not there.

use lock_core::Error;

/// The error of a backend that may not create what it needs: `lacking`
/// names what is missing, `script` is every statement that makes it all
/// (idempotent, so an administrator can run the whole of it).
pub(crate) fn missing(backend: &'static str, lacking: &[String], script: &[String]) -> Error {
    Error::InvalidConfig {
        backend,
        reason: format!(
            "create_tables=false, and the database lacks {}. An administrator can make it by \
             connecting once with create_tables=true, or by running:\n\n{};\n\nthen grant the \
             application's user the rights lock-sql's README lists under \"Least privilege\"",
            lacking.join(", "),
            script.join(";\n\n"),
        ),
    }
}
