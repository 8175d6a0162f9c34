//! Choosing a backend from a URL.

use std::sync::Arc;

use lock_core::backend::LockBackend;
use lock_core::url::QueryOptions;
use lock_core::{AcquireOptions, Error, Locker, MemoryBackend, Result};

/// Every scheme distlock knows, with the cargo feature that compiles it in:
/// what an error names when a URL's backend is compiled out. (The crates'
/// own `SCHEMES` are not there to ask when their feature is off.)
const KNOWN: &[(&str, &str)] = &[
    ("memory", "(always on)"),
    ("sqlite", "sqlite"),
    ("postgres", "postgres"),
    ("postgresql", "postgres"),
    ("mysql", "mysql"),
    ("mariadb", "mysql"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("redis+cluster", "redis"),
    ("rediss+cluster", "redis"),
    ("redis+sentinel", "redis"),
    ("rediss+sentinel", "redis"),
    ("redlock", "redlock"),
    ("etcd", "etcd"),
    ("zk", "zk"),
    ("memcache", "memcache"),
];

/// The in-process backend's scheme.
const MEMORY: &[&str] = &["memory"];

/// Each compiled-in backend crate's `SCHEMES`.
const COMPILED: &[&[&str]] = &[
    MEMORY,
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    lock_sql::SCHEMES,
    #[cfg(feature = "redis")]
    lock_redis::SCHEMES,
    #[cfg(feature = "redlock")]
    lock_redlock::SCHEMES,
    #[cfg(feature = "etcd")]
    lock_etcd::SCHEMES,
    #[cfg(feature = "zk")]
    lock_zk::SCHEMES,
    #[cfg(feature = "memcache")]
    lock_memcache::SCHEMES,
];

const fn total(parts: &[&[&str]]) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < parts.len() {
        n += parts[i].len();
        i += 1;
    }
    n
}

const fn flatten<const N: usize>(parts: &[&[&'static str]]) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut k) = (0, 0);
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[k] = parts[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

const FLAT: [&str; total(COMPILED)] = flatten(COMPILED);

/// The URL schemes this build accepts: the `SCHEMES` of every backend crate
/// compiled in.
pub const SCHEMES: &[&str] = &FLAT;

/// Query options every URL accepts, read by distlock itself rather than by
/// the backend.
const COMMON_OPTIONS: &[&str] = &["ttl"];

/// Connects to the backend `url` names and returns a [`Locker`] for it.
///
/// The scheme picks the backend (see [`SCHEMES`]); besides the backend's own
/// query options, every URL accepts `ttl=DURATION` (for example `ttl=10s`),
/// the default lease length of [`Locker::lock`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
/// let locker = distlock::connect("memory://?ttl=5s").await?;
/// assert_eq!(locker.defaults().ttl, std::time::Duration::from_secs(5));
///
/// let err = distlock::connect("gopher://host").await.unwrap_err();
/// assert!(err.to_string().contains("this build supports: memory"));
/// # Ok(()) }
/// ```
pub async fn connect(url: &str) -> Result<Locker> {
    let (backend_url, ttl) = split_common_options(url)?;
    let backend = connect_backend(&backend_url).await?;
    let mut defaults = AcquireOptions::default();
    if let Some(ttl) = ttl {
        backend.capabilities().check_ttl(ttl)?;
        defaults.ttl = ttl;
    }
    Ok(Locker::from_arc(backend).with_defaults(defaults))
}

/// Connects to the backend `url` names, for callers that want the raw
/// [`LockBackend`]. Common options such as `ttl` are not accepted here.
pub async fn connect_backend(url: &str) -> Result<Arc<dyn LockBackend>> {
    let scheme = scheme_of(url)?;
    match scheme {
        s if MEMORY.contains(&s) => {
            QueryOptions::parse(url)?.finish(&[])?;
            Ok(Arc::new(MemoryBackend::new()))
        }
        #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
        s if lock_sql::SCHEMES.contains(&s) => {
            Ok(Arc::new(lock_sql::SqlBackend::connect(url).await?))
        }
        #[cfg(feature = "redis")]
        s if lock_redis::SCHEMES.contains(&s) => {
            Ok(Arc::new(lock_redis::RedisBackend::connect(url).await?))
        }
        #[cfg(feature = "redlock")]
        s if lock_redlock::SCHEMES.contains(&s) => {
            Ok(Arc::new(lock_redlock::RedlockBackend::connect(url).await?))
        }
        #[cfg(feature = "etcd")]
        s if lock_etcd::SCHEMES.contains(&s) => {
            Ok(Arc::new(lock_etcd::EtcdBackend::connect(url).await?))
        }
        #[cfg(feature = "zk")]
        s if lock_zk::SCHEMES.contains(&s) => Ok(Arc::new(lock_zk::ZkBackend::connect(url).await?)),
        #[cfg(feature = "memcache")]
        s if lock_memcache::SCHEMES.contains(&s) => Ok(Arc::new(
            lock_memcache::MemcacheBackend::connect(url).await?,
        )),
        _ => Err(unsupported(scheme)),
    }
}

fn scheme_of(url: &str) -> Result<&str> {
    let scheme = url
        .split_once(':')
        .map(|(s, _)| s)
        .filter(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
        .ok_or_else(|| {
            Error::invalid_url(
                url,
                format!(
                    "a URL starts with a scheme such as sqlite:// ; this build supports: {}",
                    SCHEMES.join(", ")
                ),
            )
        })?;
    Ok(scheme)
}

fn unsupported(scheme: &str) -> Error {
    match KNOWN.iter().find(|(s, _)| *s == scheme) {
        Some((_, feature)) => Error::feature_disabled(scheme, feature, SCHEMES.to_vec()),
        None => Error::unknown_scheme(scheme, SCHEMES.to_vec()),
    }
}

/// `url` without the options distlock reads itself (`ttl`): the URL a
/// backend crate's own `connect` accepts, for an application that wants a
/// backend's concrete type from the same URL it gives [`connect`].
///
/// ```
/// assert_eq!(
///     distlock::backend_url("sqlite://locks.db?ttl=5s&table=jobs")?,
///     "sqlite://locks.db?table=jobs"
/// );
/// # Ok::<(), distlock::Error>(())
/// ```
pub fn backend_url(url: &str) -> Result<String> {
    Ok(split_common_options(url)?.0)
}

/// Removes the common options from `url`, returning the URL the backend sees
/// and the values taken.
fn split_common_options(url: &str) -> Result<(String, Option<std::time::Duration>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut common = QueryOptions::parse(url)?;
    let ttl = common.take_duration("ttl")?;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(k, _)| k);
            !pair.is_empty() && !COMMON_OPTIONS.contains(&key)
        })
        .collect();
    let backend_url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((backend_url, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_options_are_taken_out() {
        let (u, ttl) = split_common_options("sqlite://x.db?ttl=2s&table=t").unwrap();
        assert_eq!(u, "sqlite://x.db?table=t");
        assert_eq!(ttl, Some(std::time::Duration::from_secs(2)));
        assert_eq!(
            split_common_options("memory://?ttl=1s").unwrap().0,
            "memory://"
        );
        assert!(split_common_options("memory://?ttl=soon").is_err());
    }

    #[tokio::test]
    async fn unknown_and_missing_schemes_name_what_is_compiled_in() {
        let unknown = connect("gopher://h").await.unwrap_err();
        assert!(matches!(unknown, Error::UnknownScheme { .. }), "{unknown}");
        let no_scheme = connect("just-a-path.db").await.unwrap_err().to_string();
        assert!(no_scheme.contains("starts with a scheme"), "{no_scheme}");
        // Whatever this build lacks is named with the feature that adds it.
        for (scheme, feature) in KNOWN.iter().filter(|(s, _)| !SCHEMES.contains(s)) {
            let err = connect(&format!("{scheme}://127.0.0.1:1"))
                .await
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("\"{feature}\" feature")) && err.contains("memory"),
                "{err}"
            );
        }
        let disabled = unsupported("etcd").to_string();
        assert!(
            disabled.contains("\"etcd\" feature") && disabled.contains("this build supports"),
            "{disabled}"
        );
    }

    #[test]
    fn every_compiled_scheme_is_known_once() {
        for scheme in SCHEMES {
            assert!(KNOWN.iter().any(|(s, _)| s == scheme), "{scheme}");
            assert_eq!(SCHEMES.iter().filter(|s| *s == scheme).count(), 1);
        }
    }

    #[tokio::test]
    async fn ttl_outside_the_backend_bounds_is_rejected() {
        let err = connect("memory://?ttl=0s").await.unwrap_err();
        assert!(matches!(err, Error::InvalidTtl { .. }), "{err}");
    }
}
