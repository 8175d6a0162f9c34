//! What every server dialect (PostgreSQL, MySQL/MariaDB) reads from its
//! URL beside sqlx's own options and the common ones, and the rounding of
//! the `timeout` into a server's own limit.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lock_core::Result;
use lock_core::backend::QueryOptions;
use lock_core::secret::Password;

use crate::names::COMMON;
use crate::tls::Tls;

/// Splits `url` into the part before `?` and the query pairs whose keys are
/// in `passthrough`, rebuilt for the driver (its TLS options, say).
fn driver_url(url: &str, q: &mut QueryOptions, passthrough: &[&str]) -> String {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    let mut forwarded = form_urlencoded::Serializer::new(String::new());
    for key in passthrough {
        if let Some(value) = q.take(key) {
            forwarded.append_pair(key, &value);
        }
    }
    let query = forwarded.finish();
    if query.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{query}")
    }
}

/// The password file named by `password_file`, read when the backend
/// connects; refused beside a password in the URL's user-info.
fn password_file(url: &str, q: &mut QueryOptions) -> Result<Option<PathBuf>> {
    let base = url.split_once('?').map_or(url, |(b, _)| b);
    let authority = base
        .split_once("://")
        .map_or("", |(_, rest)| rest.split('/').next().unwrap_or_default());
    let given = authority
        .rsplit_once('@')
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password.to_owned());
    Ok(match Password::from_query(q, given)? {
        Some(Password::File(path)) => Some(path),
        _ => None,
    })
}

/// What every server dialect reads from its URL beside sqlx's own
/// options and the common ones: the password file and TLS, and the URL
/// handed to sqlx without its password, which is all its `Debug` shows
/// (sqlx's connect options print the password).
#[derive(Clone)]
pub(crate) struct ServerOptions {
    pub(crate) redacted: String,
    pub(crate) password_file: Option<PathBuf>,
    pub(crate) tls: Tls,
}

impl ServerOptions {
    /// Takes them from `q`, the query of `url`, whose common options and
    /// dialect's own (`own`, listed as accepted) are taken already.
    /// `driver_tls` are the dialect's TLS names, refused beside the shared
    /// ones; `passthrough` are handed to sqlx in the URL returned with them.
    /// Any option left is an error.
    pub(crate) fn take(
        url: &str,
        mut q: QueryOptions,
        own: &[&str],
        driver_tls: &[&str],
        passthrough: &[&str],
    ) -> Result<(Self, String)> {
        let password_file = password_file(url, &mut q)?;
        let tls = Tls::take(&mut q, url, driver_tls)?;
        let sqlx_url = driver_url(url, &mut q, passthrough);
        q.finish(
            &[
                COMMON,
                own,
                &[lock_core::secret::PASSWORD_FILE],
                &lock_core::tls::TlsOptions::URL_OPTIONS,
                passthrough,
            ]
            .concat(),
        )?;
        let server = Self {
            redacted: lock_core::url::redact(&sqlx_url),
            password_file,
            tls,
        };
        Ok((server, sqlx_url))
    }

    /// `Debug` of the dialect's config named `name`.
    pub(crate) fn fmt(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("url", &self.redacted)
            .field("password_file", &self.password_file.as_deref())
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// `timeout` in whole `unit`s for a server-side limit: rounded up, since a
/// limit of zero means none to every server here, and at most `max`, the
/// largest the server accepts.
pub(crate) fn server_limit(timeout: Duration, unit: Duration, max: u128) -> u128 {
    timeout.as_nanos().div_ceil(unit.as_nanos()).clamp(1, max)
}
