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
