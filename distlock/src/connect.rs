//! Choosing a backend from a URL.

use std::sync::Arc;

use lock_core::url::QueryOptions;
use lock_core::{AcquireOptions, Error, LockBackend, Locker, MemoryBackend, Result};

/// Every scheme distlock knows, with the cargo feature that compiles it in.
const KNOWN: &[(&str, &str)] = &[
    ("memory", "(always on)"),
    ("sqlite", "sqlite"),
    ("postgres", "postgres"),
    ("postgresql", "postgres"),
    ("mysql", "mysql"),
    ("mariadb", "mysql"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("redlock", "redlock"),
    ("etcd", "etcd"),
    ("zk", "zk"),
    ("memcache", "memcache"),
];

/// The URL schemes this build accepts.
pub const SCHEMES: &[&str] = &[
    "memory",
    #[cfg(feature = "sqlite")]
    "sqlite",
    #[cfg(feature = "postgres")]
    "postgres",
    #[cfg(feature = "postgres")]
    "postgresql",
    #[cfg(feature = "mysql")]
    "mysql",
    #[cfg(feature = "mysql")]
    "mariadb",
    #[cfg(feature = "redis")]
    "redis",
    #[cfg(feature = "redis")]
    "rediss",
    #[cfg(feature = "redlock")]
    "redlock",
    #[cfg(feature = "etcd")]
    "etcd",
    #[cfg(feature = "zk")]
    "zk",
    #[cfg(feature = "memcache")]
    "memcache",
];

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
        "memory" => {
            QueryOptions::parse(url)?.finish(&[])?;
            Ok(Arc::new(MemoryBackend::new()))
        }
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Arc::new(lock_sql::SqlBackend::connect(url).await?)),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(lock_sql::SqlBackend::connect(url).await?)),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Ok(Arc::new(lock_sql::SqlBackend::connect(url).await?)),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Ok(Arc::new(lock_redis::RedisBackend::connect(url).await?)),
        #[cfg(feature = "redlock")]
        "redlock" => Ok(Arc::new(lock_redlock::RedlockBackend::connect(url).await?)),
        #[cfg(feature = "etcd")]
        "etcd" => Ok(Arc::new(lock_etcd::EtcdBackend::connect(url).await?)),
        #[cfg(feature = "zk")]
        "zk" => Ok(Arc::new(lock_zk::ZkBackend::connect(url).await?)),
        #[cfg(feature = "memcache")]
        "memcache" => Ok(Arc::new(
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
        Some((_, feature)) => Error::FeatureDisabled {
            scheme: scheme.to_owned(),
            feature,
            supported: SCHEMES.to_vec(),
        },
        None => Error::UnknownScheme {
            scheme: scheme.to_owned(),
            supported: SCHEMES.to_vec(),
        },
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

    #[tokio::test]
    async fn ttl_outside_the_backend_bounds_is_rejected() {
        let err = connect("memory://?ttl=0s").await.unwrap_err();
        assert!(matches!(err, Error::InvalidTtl { .. }), "{err}");
    }
}
