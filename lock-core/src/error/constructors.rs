//! The constructors every backend makes its errors with: the variants are
//! `#[non_exhaustive]`, so that outside this crate they can be matched but
//! not built.

use std::time::Duration;

use super::{BoxError, Error};

impl Error {
    /// An [`Error::Busy`] for `name`.
    pub fn busy(name: impl std::fmt::Display) -> Self {
        Error::Busy {
            name: name.to_string(),
        }
    }

    /// An [`Error::Lost`] for `name`.
    pub fn lost(name: impl std::fmt::Display) -> Self {
        Error::Lost {
            name: name.to_string(),
        }
    }

    /// An [`Error::WaitTimeout`] for `name` after `waited`.
    pub fn wait_timeout(name: impl std::fmt::Display, waited: Duration) -> Self {
        Error::WaitTimeout {
            name: name.to_string(),
            waited,
        }
    }

    /// An [`Error::AlreadyHeld`] for `name`.
    pub fn already_held(name: impl std::fmt::Display) -> Self {
        Error::AlreadyHeld {
            name: name.to_string(),
        }
    }

    /// An [`Error::InvalidTtl`]: `ttl` is outside `backend`'s `min..=max`.
    pub fn invalid_ttl(ttl: Duration, min: Duration, max: Duration, backend: &'static str) -> Self {
        Error::InvalidTtl {
            ttl,
            min,
            max,
            backend,
        }
    }

    /// An [`Error::InvalidPermits`]: `permits` is not from 1 to `max`.
    pub fn invalid_permits(permits: u32, max: u32) -> Self {
        Error::InvalidPermits { permits, max }
    }

    /// An [`Error::InvalidName`]: `name` (escaped and shortened by the
    /// caller) breaks `reason`.
    pub fn invalid_name(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidName {
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// An [`Error::InvalidConfig`] of `backend`'s configuration: a value
    /// set in code or read from a file, not a URL's.
    pub fn invalid_config(backend: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            backend,
            reason: reason.into(),
        }
    }

    /// An [`Error::UnknownScheme`]: `scheme` is none of `supported`.
    pub fn unknown_scheme(scheme: impl Into<String>, supported: Vec<&'static str>) -> Self {
        Error::UnknownScheme {
            scheme: scheme.into(),
            supported,
        }
    }

    /// An [`Error::FeatureDisabled`]: `scheme` needs `feature`.
    pub fn feature_disabled(
        scheme: impl Into<String>,
        feature: &'static str,
        supported: Vec<&'static str>,
    ) -> Self {
        Error::FeatureDisabled {
            scheme: scheme.into(),
            feature,
            supported,
        }
    }

    /// An [`Error::Unsupported`]: `backend` does not offer `operation`.
    pub fn unsupported(backend: &'static str, operation: &'static str) -> Self {
        Error::Unsupported { backend, operation }
    }

    /// An [`Error::Unavailable`] with a message and no source (see
    /// [`Error::with_source`]).
    pub fn unavailable(backend: &'static str, message: impl Into<String>) -> Self {
        Error::Unavailable {
            backend,
            message: message.into(),
            source: None,
        }
    }

    /// The same [`Error::Unavailable`] or [`Error::Backend`] with `source`
    /// as its [`source`](std::error::Error::source); any other error as it
    /// was.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        if let Error::Unavailable { source: s, .. } | Error::Backend { source: s, .. } = &mut self {
            *s = Some(source.into());
        }
        self
    }

    /// The same mistake found in a configuration made in code: an
    /// [`Error::InvalidUrl`] (from a check shared with URL parsing) becomes
    /// an [`Error::InvalidConfig`] of `backend` with the same reason, which
    /// names the option; any other error stays as it was.
    pub fn into_config(self, backend: &'static str) -> Self {
        match self {
            Error::InvalidUrl { reason, .. } => Error::invalid_config(backend, reason),
            e => e,
        }
    }

    /// The same mistake found in a URL: an [`Error::InvalidConfig`] (from a
    /// config type's check, which names the option) becomes an
    /// [`Error::InvalidUrl`] of `url` with the same reason; any other error
    /// stays as it was.
    pub fn into_url(self, url: &str) -> Self {
        match self {
            Error::InvalidConfig { reason, .. } => Error::invalid_url(url, reason),
            e => e,
        }
    }

    /// An [`Error::NotHeld`] for `name`: the lease is no longer the
    /// caller's.
    pub fn not_held(name: impl std::fmt::Display) -> Self {
        Error::NotHeld {
            name: name.to_string(),
        }
    }

    /// A [`Error::Backend`] with a message and no source.
    pub fn backend(message: impl Into<String>) -> Self {
        Error::Backend {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Timeout`]: `operation` got no answer within `after`.
    pub fn timeout(operation: &'static str, after: Duration) -> Self {
        Error::Timeout { operation, after }
    }

    /// An [`Error::Unavailable`] from a driver's error that a retry may get
    /// past, met during `operation`.
    pub fn unavailable_from<E>(backend: &'static str, operation: &str, e: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Unavailable {
            backend,
            message: format!("{operation}: {e}"),
            source: Some(Box::new(e)),
        }
    }

    /// An [`Error::Backend`] from a driver's error that a retry does not
    /// help, met during `operation`.
    pub fn backend_from<E>(backend: &'static str, operation: &str, e: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Backend {
            message: format!("{backend} {operation}: {e}"),
            source: Some(Box::new(e)),
        }
    }

    /// An [`Error::InvalidUrl`]; `url` is redacted before it is stored.
    pub fn invalid_url(url: &str, reason: impl Into<String>) -> Self {
        Error::InvalidUrl {
            url: crate::redact::redact(url),
            reason: reason.into(),
        }
    }
}
