//! What a backend keeps in its database, made at start or, with
//! `create_tables=false`, only looked for: a role granted the use of the
//! tables and nothing more cannot create them, and must be told what an
//! administrator has to run when they are not there.

use lock_core::{Error, Result};

/// The elections table, which databases set up before lock-sql kept
/// elections lack: its entry in a list of what is lacking, and the
/// statement that makes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Elections<'a> {
    pub(crate) lacking: &'a str,
    pub(crate) create: &'a str,
}

/// Nothing, if nothing is `lacking`; else the error of a backend that may
/// not create what it needs, naming what is missing, with `script`: every
/// statement that makes it all (idempotent, so an administrator can run
/// the whole of it).
///
/// The elections table alone missing is no error: the mutex, semaphores
/// and read-write locks of a database an earlier lock-sql set up must go on
/// working after an upgrade, before anybody made it. That gets a warning
/// saying what to run, and elections fail, naming the table, until then.
pub(crate) fn require(
    backend: &'static str,
    lacking: &[String],
    elections: Elections<'_>,
    script: impl FnOnce() -> Vec<String>,
) -> Result<()> {
    match lacking {
        [] => return Ok(()),
        [only] if only == elections.lacking => {
            tracing::warn!(
                backend,
                "create_tables=false, and the database lacks {} (set up by a lock-sql that kept no \
                 elections): locks, semaphores and read-write locks work, but elections fail until \
                 an administrator runs:\n\n{};\n\nand grants the application's user SELECT, \
                 INSERT, UPDATE, DELETE on it (lock-sql's README, \"Elections\")",
                elections.lacking,
                elections.create,
            );
            return Ok(());
        }
        _ => {}
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
