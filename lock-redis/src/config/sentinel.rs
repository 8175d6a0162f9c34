//! Where `redis+sentinel://` URLs say to ask for the master.

use std::fmt;
use std::path::PathBuf;

use lock_core::secret::Password;
use lock_core::tls::TlsOptions;
use lock_core::url::{host_with_port, redact};
use lock_core::{Error, Result};

/// Where Redis Sentinel is asked for the master. `Debug` never shows the
/// password.
#[derive(Clone)]
#[non_exhaustive]
pub struct SentinelConfig {
    /// The sentinels, `(host, port)`.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels know the master by.
    pub master: String,
    /// The data nodes' user, if any.
    pub username: Option<String>,
    pub(crate) password: Option<Password>,
    /// TLS to the sentinels and to the data nodes (`rediss+sentinel://`
    /// or `tls=true`): the same CA and client certificate for both.
    pub tls: TlsOptions,
    /// The URL without its password, for messages.
    pub(crate) redacted: String,
}

impl SentinelConfig {
    /// `rest` is what follows `redis[s]+sentinel://`; `password_file`
    /// holds the data nodes' password if the URL does not.
    pub(super) fn parse(
        url: &str,
        rest: &str,
        tls: TlsOptions,
        password_file: Option<PathBuf>,
    ) -> Result<Self> {
        let shape = "expected redis+sentinel://[USER:PASSWORD@]HOST:PORT,HOST:PORT,…/MASTER_NAME";
        let base = rest.split_once('?').map_or(rest, |(b, _)| b);
        let (authority, master) = base
            .split_once('/')
            .filter(|(_, m)| !m.is_empty() && !m.contains('/'))
            .ok_or_else(|| Error::invalid_url(url, format!("no master name: {shape}")))?;
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|d| d.into_owned())
                .map_err(|_| Error::invalid_url(url, "credentials are not UTF-8"))
        };
        let (username, password) = match credentials {
            None => (None, None),
            Some(c) => match c.split_once(':') {
                Some((u, p)) => (
                    (!u.is_empty()).then(|| decode(u)).transpose()?,
                    Some(decode(p)?),
                ),
                None => (Some(decode(c)?), None),
            },
        };
        let sentinels = hosts
            .split(',')
            .map(|h| {
                let label = host_with_port(url, h, 26379, shape)?;
                let (host, port) = label.rsplit_once(':').unwrap_or((&label, "26379"));
                let port = port.parse().map_err(|_| {
                    Error::invalid_url(url, format!("bad port in \"{h}\": {shape}"))
                })?;
                Ok((host.trim_matches(['[', ']']).to_owned(), port))
            })
            .collect::<Result<Vec<_>>>()?;
        let password = match (password, password_file) {
            (Some(_), Some(_)) => return Err(lock_core::secret::given_twice(url)),
            (Some(p), None) => Some(Password::Given(p)),
            (None, file) => file.map(Password::File),
        };
        Ok(Self {
            sentinels,
            master: decode(master)?,
            username,
            password,
            tls,
            redacted: redact(url),
        })
    }

    /// `master@host:port,…`, for messages.
    pub fn label(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        format!("{}@{}", self.master, hosts.join(","))
    }
}

impl fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("username", &self.username)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use lock_core::secret::Password;

    use crate::config::RedisConfig;

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        let c = RedisConfig::parse(
            "redis+sentinel://app:s3cret@127.0.0.1:26379,127.0.0.2/mymaster?wait_replicas=1",
        )
        .unwrap();
        let s = c.sentinel.as_ref().unwrap();
        assert_eq!(
            s.sentinels,
            [
                ("127.0.0.1".to_owned(), 26379),
                ("127.0.0.2".to_owned(), 26379)
            ]
        );
        assert_eq!(s.master, "mymaster");
        assert_eq!(s.username.as_deref(), Some("app"));
        assert_eq!(s.password, Some(Password::Given("s3cret".into())));
        assert_eq!(c.wait.map(|w| w.replicas), Some(1));
        assert!(!format!("{c:?}").contains("s3cret"));
        for url in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1:x/m",
        ] {
            let err = RedisConfig::parse(url).unwrap_err();
            assert!(err.is_invalid_input(), "{url}: {err}");
            assert!(!err.to_string().contains("s3cret"));
        }
    }
}
