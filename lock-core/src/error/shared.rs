//! One error for many callers: the outcome of an attempt that a
//! [`SingleFlight`](crate::backend::SingleFlight) shares.

use std::sync::Arc;

use super::{BoxError, Error};

impl Error {
    /// The same error for one more caller of an attempt whose outcome many
    /// share ([`SingleFlight`](crate::backend::SingleFlight)): the same
    /// variant and words; a driver's error, which cannot be copied, stays
    /// shared as the source.
    pub(crate) fn shared(original: &Arc<Error>) -> Self {
        let source = || -> Option<BoxError> {
            original
                .source_error()
                .map(|_| Box::new(SharedSource(original.clone())) as BoxError)
        };
        match &**original {
            Error::InvalidName { name, reason } => Error::InvalidName {
                name: name.clone(),
                reason: reason.clone(),
            },
            Error::InvalidTtl {
                ttl,
                min,
                max,
                backend,
            } => Error::InvalidTtl {
                ttl: *ttl,
                min: *min,
                max: *max,
                backend,
            },
            Error::InvalidPermits { permits, max } => Error::InvalidPermits {
                permits: *permits,
                max: *max,
            },
            Error::InvalidValue { len, reason } => Error::InvalidValue {
                len: *len,
                reason: reason.clone(),
            },
            Error::InvalidUrl { url, reason } => Error::InvalidUrl {
                url: url.clone(),
                reason: reason.clone(),
            },
            Error::InvalidConfig { backend, reason } => Error::InvalidConfig {
                backend,
                reason: reason.clone(),
            },
            Error::UnknownScheme { scheme, supported } => Error::UnknownScheme {
                scheme: scheme.clone(),
                supported: supported.clone(),
            },
            Error::FeatureDisabled {
                scheme,
                feature,
                supported,
            } => Error::FeatureDisabled {
                scheme: scheme.clone(),
                feature,
                supported: supported.clone(),
            },
            Error::Busy { name } => Error::Busy { name: name.clone() },
            Error::AlreadyHeld { name } => Error::AlreadyHeld { name: name.clone() },
            Error::WaitTimeout { name, waited } => Error::WaitTimeout {
                name: name.clone(),
                waited: *waited,
            },
            Error::NotHeld { name } => Error::NotHeld { name: name.clone() },
            Error::Lost { name } => Error::Lost { name: name.clone() },
            Error::Unavailable {
                backend, message, ..
            } => Error::Unavailable {
                backend,
                message: message.clone(),
                source: source(),
            },
            Error::Timeout { operation, after } => Error::Timeout {
                operation,
                after: *after,
            },
            Error::Unsupported { backend, operation } => Error::Unsupported { backend, operation },
            Error::Backend { message, .. } => Error::Backend {
                message: message.clone(),
                source: source(),
            },
        }
    }

    /// The driver's error kept as the source, if any.
    fn source_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            Error::Unavailable { source, .. } | Error::Backend { source, .. } => source.as_deref(),
            _ => None,
        }
    }
}

/// The source of an error many callers share: shows, and leads on to,
/// what the original's source does.
#[derive(Debug)]
struct SharedSource(Arc<Error>);

impl std::fmt::Display for SharedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.source_error() {
            Some(source) => std::fmt::Display::fmt(source, f),
            None => Ok(()),
        }
    }
}

impl std::error::Error for SharedSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source_error().and_then(|s| s.source())
    }
}
