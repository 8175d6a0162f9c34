//! The one error type of every distlock crate.

use std::time::Duration;

/// A boxed error from a driver, kept as the `source()` of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, for every backend.
///
/// The variants say *what* happened in terms of the lock; the backend's own
/// error, when there is one, is the [`source`](std::error::Error::source).
/// [`Error::is_retryable`] tells whether trying the same call again may help.
/// No variant ever carries a password: URLs are stored redacted.
///
/// The enum and each variant are `#[non_exhaustive]`, so that variants and
/// fields can be added without breaking anybody: match a variant with
/// `{ .. }` (`Error::Busy { .. }`, `Error::Unavailable { backend, .. }`), or
/// ask [`Error::is_busy`], [`Error::is_contention`], [`Error::is_lost`] and
/// the other predicates; backends make errors with the constructors
/// ([`Error::busy`], [`Error::unavailable`], …).
///
/// A mistake in a URL is [`Error::InvalidUrl`]; the same mistake in a
/// configuration made in code (an option setter, a driver's pool) is
/// [`Error::InvalidConfig`], which names the backend and the option.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name breaks the rules documented on [`LockName`](crate::LockName).
    #[non_exhaustive]
    #[error("invalid lock name \"{name}\": {reason}")]
    InvalidName {
        /// The rejected name, escaped and shortened.
        name: String,
        /// What rule it breaks.
        reason: String,
    },

    /// A TTL outside what the backend can keep.
    #[non_exhaustive]
    #[error("invalid TTL {ttl:?}: {backend} accepts {min:?} to {max:?}")]
    InvalidTtl {
        /// The rejected TTL.
        ttl: Duration,
        /// The backend's shortest TTL.
        min: Duration,
        /// The backend's longest TTL.
        max: Duration,
        /// The backend that set the bounds.
        backend: &'static str,
    },

    /// A semaphore asked for with no permits, or with more than
    /// [`LockKind::MAX_PERMITS`](crate::LockKind::MAX_PERMITS).
    #[non_exhaustive]
    #[error("invalid permit count {permits}: a semaphore has 1 to {max} permits")]
    InvalidPermits {
        /// The rejected count.
        permits: u32,
        /// The most a semaphore may have.
        max: u32,
    },

    /// A leader's value too long, or with a NUL character (which some stores
    /// cannot keep in text).
    #[non_exhaustive]
    #[error("invalid leader value ({len} bytes): {reason}")]
    InvalidValue {
        /// The length of the rejected value, in bytes.
        len: usize,
        /// What is wrong and what is accepted.
        reason: String,
    },

    /// A connection URL or one of its options is malformed.
    #[non_exhaustive]
    #[error("invalid URL {url}: {reason}")]
    InvalidUrl {
        /// The URL with any password removed.
        url: String,
        /// What is wrong and what is accepted.
        reason: String,
    },

    /// A backend's configuration cannot be used as given: a TLS file that
    /// is missing, unreadable or not what its option needs, say.
    #[non_exhaustive]
    #[error("{backend}: invalid configuration: {reason}")]
    InvalidConfig {
        /// The backend whose configuration it is.
        backend: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },

    /// The URL scheme is not one this build knows.
    #[non_exhaustive]
    #[error("unknown URL scheme \"{scheme}\"; this build supports: {}", supported.join(", "))]
    UnknownScheme {
        /// The scheme given.
        scheme: String,
        /// The schemes compiled in.
        supported: Vec<&'static str>,
    },

    /// The URL names a backend whose cargo feature was not compiled in.
    #[non_exhaustive]
    #[error(
        "URL scheme \"{scheme}\" needs distlock's \"{feature}\" feature, which this build lacks; \
         this build supports: {}", supported.join(", ")
    )]
    FeatureDisabled {
        /// The scheme given.
        scheme: String,
        /// The cargo feature that would enable it.
        feature: &'static str,
        /// The schemes compiled in.
        supported: Vec<&'static str>,
    },

    /// Somebody else holds the lock and the caller chose not to wait.
    #[non_exhaustive]
    #[error("lock \"{name}\" is held by another owner")]
    Busy {
        /// The lock.
        name: String,
    },

    /// The task asking for the lock already holds it through a guard of the
    /// same [`Locker`](crate::Locker): waiting would wait on itself until the
    /// wait ran out. Pass the held guard's [`LockHandle`](crate::LockHandle)
    /// down instead of locking again, or ask with
    /// [`AcquireOptions::reentrant`](crate::AcquireOptions::reentrant) for a
    /// second hold of the same grant.
    #[non_exhaustive]
    #[error(
        "lock \"{name}\" is already held by this task through this locker; ask with reentrant(true) to share its hold"
    )]
    AlreadyHeld {
        /// The lock.
        name: String,
    },

    /// Somebody else held the lock for the whole wait.
    #[non_exhaustive]
    #[error("timed out after {waited:?} waiting for lock \"{name}\"")]
    WaitTimeout {
        /// The lock.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },

    /// The lease is no longer ours: it expired, or another owner took the
    /// lock after it expired. Renewing or releasing it did nothing.
    #[non_exhaustive]
    #[error(
        "lock \"{name}\" is no longer held by this owner (its lease expired or was taken over)"
    )]
    NotHeld {
        /// The lock.
        name: String,
    },

    /// The lock was lost while the critical section ran (see
    /// [`LockState::Lost`](crate::LockState::Lost)); the section was cancelled.
    #[non_exhaustive]
    #[error("lock \"{name}\" was lost while held; the critical section was cancelled")]
    Lost {
        /// The lock.
        name: String,
    },

    /// The backend cannot be reached, or dropped the connection.
    #[non_exhaustive]
    #[error("{backend} is unavailable: {message}")]
    Unavailable {
        /// Which backend.
        backend: &'static str,
        /// What failed, in words.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<BoxError>,
    },

    /// A call to the backend did not finish within its time limit.
    #[non_exhaustive]
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The limit that passed.
        after: Duration,
    },

    /// The backend does not offer this operation.
    #[non_exhaustive]
    #[error("{backend} does not support {operation}")]
    Unsupported {
        /// Which backend.
        backend: &'static str,
        /// The missing operation.
        operation: &'static str,
    },

    /// Any other backend failure; not expected to go away on retry.
    #[non_exhaustive]
    #[error("backend error: {message}")]
    Backend {
        /// What failed, in words.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<BoxError>,
    },
}

impl Error {
    /// Whether the same call may succeed if tried again later: either
    /// [contention](Self::is_contention) or [transient backend
    /// trouble](Self::is_transient). Invalid input, a lost lease and
    /// unsupported operations never get better by retrying.
    pub fn is_retryable(&self) -> bool {
        self.is_contention() || self.is_transient()
    }

    /// Whether somebody else holding the lock is all that went wrong: it was
    /// busy, or the wait for it ran out. The backend is fine.
    pub fn is_contention(&self) -> bool {
        matches!(self, Error::Busy { .. } | Error::WaitTimeout { .. })
    }

    /// Whether somebody else held the lock at the one attempt asked for
    /// ([`Error::Busy`]): the answer of every `try_*` method, and of any
    /// acquire with [`Wait::No`](crate::Wait::No), when the lock is taken.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// Whether a held lock turned out not to be held any more, so that
    /// what was done under it may have overlapped with another holder:
    /// [`Error::Lost`] (this process noticed first) or [`Error::NotHeld`]
    /// (the backend did).
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost { .. } | Error::NotHeld { .. })
    }

    /// Whether the backend was in trouble — unreachable, or a call timed
    /// out — so the outcome of the call is unknown and a retry may get
    /// through. Says nothing about the lock itself.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unavailable { .. } | Error::Timeout { .. })
    }

    /// Whether the error is about the caller's input rather than the backend
    /// or the lock's state.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidName { .. }
                | Error::InvalidTtl { .. }
                | Error::InvalidPermits { .. }
                | Error::InvalidValue { .. }
                | Error::InvalidUrl { .. }
                | Error::InvalidConfig { .. }
                | Error::UnknownScheme { .. }
                | Error::FeatureDisabled { .. }
        )
    }
}

mod constructors;
mod shared;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn retryability_follows_the_kind_of_failure() {
        assert!(Error::Busy { name: "a".into() }.is_retryable());
        assert!(
            Error::Timeout {
                operation: "acquire",
                after: Duration::from_secs(1)
            }
            .is_retryable()
        );
        assert!(!Error::NotHeld { name: "a".into() }.is_retryable());
        let busy = Error::Busy { name: "a".into() };
        assert!(busy.is_contention() && !busy.is_transient());
        let down = Error::Unavailable {
            backend: "x",
            message: "down".into(),
            source: None,
        };
        assert!(down.is_transient() && !down.is_contention());
        assert!(!Error::backend("x").is_retryable());
        assert!(Error::invalid_url("x://", "no").is_invalid_input());
    }

    #[test]
    fn a_shared_error_reads_as_the_original() {
        let driver = std::io::Error::other("connection refused");
        let original = Arc::new(Error::unavailable_from("x", "connect", driver));
        let copy = Error::shared(&original);
        assert_eq!(copy.to_string(), original.to_string());
        assert!(copy.is_transient());
        let source = std::error::Error::source(&copy).expect("a source");
        assert_eq!(source.to_string(), "connection refused");
        let timeout = Error::shared(&Arc::new(Error::timeout("connect", Duration::from_secs(1))));
        assert!(matches!(
            timeout,
            Error::Timeout {
                operation: "connect",
                ..
            }
        ));
    }

    #[test]
    fn a_check_shared_with_urls_reports_code_as_configuration() {
        let e = Error::invalid_url("?timeout=0s", "option \"timeout\" must be more than zero")
            .into_config("etcd");
        assert!(
            matches!(&e, Error::InvalidConfig { backend: "etcd", reason, .. } if reason.contains("timeout")),
            "{e:?}"
        );
        assert!(e.is_invalid_input());
        assert!(Error::busy("a").into_config("etcd").is_busy());
        let back = e.into_url("etcd://u:secret@h:1?timeout=0s");
        assert!(
            matches!(&back, Error::InvalidUrl { url, reason } if reason.contains("timeout") && !url.contains("secret")),
            "{back:?}"
        );
    }

    #[test]
    fn with_source_keeps_the_driver_error() {
        let e = Error::unavailable("x", "down").with_source(std::io::Error::other("refused"));
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "refused");
        assert!(e.is_transient());
    }

    #[test]
    fn invalid_url_never_keeps_the_password() {
        let e = Error::invalid_url("postgres://bob:hunter2@localhost/db", "bad");
        assert!(!format!("{e} {e:?}").contains("hunter2"));
    }
}
