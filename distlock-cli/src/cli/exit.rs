//! distlock's own exit statuses. A command that ran under the lock gives its
//! own status instead (128 + N if a signal N ended it).

use distlock::Error;

/// Bad usage or invalid input: a bad flag, lock name, TTL or URL (EX_USAGE).
pub(crate) const USAGE: u8 = 64;
/// The backend could not be reached or failed (EX_UNAVAILABLE).
pub(crate) const UNAVAILABLE: u8 = 69;
/// An internal error in distlock itself (EX_SOFTWARE).
pub(crate) const INTERNAL: u8 = 70;
/// The lock is held by somebody else and `--no-wait` was given (EX_TEMPFAIL).
pub(crate) const BUSY: u8 = 75;
/// `--wait` ran out before the lock was granted (as `timeout(1)` does).
pub(crate) const WAIT_TIMEOUT: u8 = 124;
/// The lock was lost, or renewal kept failing until only `--grace` was left,
/// while the command ran (the command was stopped); or it was granted with
/// too little lease left to run anything.
pub(crate) const LOST: u8 = 125;
/// The command exists but could not be executed (as a shell does).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as a shell does).
pub(crate) const NOT_FOUND: u8 = 127;

/// The statuses as `--help` and the man pages list them.
pub(crate) const STATUSES: &str = "\
the command's own status   when the command ran (128+N if signal N ended it)
64   bad usage or invalid input (flag, lock name, TTL, URL)
69   the backend is unreachable or failed
70   internal error
75   the lock is busy and --no-wait was given
124  --wait ran out before the lock was granted
125  the lock was lost (or renewal kept failing) while the command ran;
     the command was stopped (or never started: too little lease left)
126  the command could not be executed
127  the command was not found";

/// The exit status for a library error.
pub(crate) fn for_error(e: &Error) -> u8 {
    match e {
        _ if e.is_invalid_input() => USAGE,
        Error::Busy { .. } => BUSY,
        Error::WaitTimeout { .. } => WAIT_TIMEOUT,
        Error::Lost { .. } | Error::NotHeld { .. } => LOST,
        Error::Unavailable { .. }
        | Error::Timeout { .. }
        | Error::Backend { .. }
        | Error::Unsupported { .. } => UNAVAILABLE,
        _ => INTERNAL,
    }
}
