//! What asking Redis Sentinel for the master takes, from a
//! [`Topology::Sentinel`](super::Topology::Sentinel).

use std::fmt;

use lock_core::Result;
use lock_core::secret::Password;
use lock_core::tls::TlsOptions;

use super::server::split_addr;
use super::{RedisConfig, Topology};

/// Where Redis Sentinel is asked for the master. `Debug` never shows the
/// password.
#[derive(Clone)]
pub(crate) struct SentinelConfig {
    /// The sentinels, `(host, port)`.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The name the sentinels know the master by.
    pub(crate) master: String,
    /// The data nodes' user, if any.
    pub(crate) username: Option<String>,
    pub(crate) password: Option<Password>,
    /// TLS to the sentinels and to the data nodes: the same CA and client
    /// certificate for both.
    pub(crate) tls: TlsOptions,
}

impl SentinelConfig {
    /// The sentinels of `config`, if its topology names some.
    pub(crate) fn of(config: &RedisConfig) -> Result<Option<Self>> {
        let Topology::Sentinel {
            sentinels,
            master,
            username,
            password,
        } = &config.topology
        else {
            return Ok(None);
        };
        Ok(Some(Self {
            sentinels: sentinels
                .iter()
                .map(|s| split_addr(s))
                .collect::<Result<_>>()?,
            master: master.clone(),
            username: username.clone(),
            password: password.clone(),
            tls: config.tls.clone(),
        }))
    }

    /// `master@host:port,…`, for messages.
    pub(crate) fn label(&self) -> String {
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
