//! The options of a backend made from an application's own client.

use std::time::Duration;

use lock_core::Result;

use super::node::{CommonOptions, NodeConfig, ReplicaWait};

/// The options of a backend made with
/// [`RedisBackend::from_client`](crate::RedisBackend::from_client): a
/// `redis://` URL's options, with the same defaults and checks, for a
/// `redis::Client` the application made.
///
/// ```
/// use std::time::Duration;
/// use lock_redis::config::RedisOptions;
///
/// let options = RedisOptions::new()
///     .prefix("billing:")
///     .timeout(Duration::from_millis(500))
///     .wait_replicas(1, Duration::from_secs(1));
/// ```
#[derive(Clone, Debug)]
pub struct RedisOptions {
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    allow_eviction: bool,
    wait: Option<ReplicaWait>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: CommonOptions::DEFAULT_PREFIX.to_owned(),
            timeout: NodeConfig::DEFAULT_TIMEOUT,
            connect_timeout: NodeConfig::DEFAULT_TIMEOUT,
            allow_eviction: false,
            wait: None,
        }
    }
}

impl RedisOptions {
    /// The defaults: prefix `distlock:`, 2 s timeouts, no eviction, no
    /// `WAIT`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Prefix of every key and of the release channel (URL option
    /// `prefix`): at most 64 printable ASCII characters, without spaces or
    /// `#`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The longest wait for any command's answer (URL option `timeout`),
    /// whatever the client's own settings; more than zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest wait for each connection the backend opens from the
    /// client (URL option `connect_timeout`); more than zero.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether to use a server whose memory policy may evict lock keys
    /// (URL option `allow_eviction`; see the crate docs).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Makes every grant wait until `replicas` replicas have it, for at
    /// most `timeout` (URL options `wait_replicas` and `wait_timeout`); 0
    /// replicas turns it off.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = (replicas > 0).then_some(ReplicaWait { replicas, timeout });
        self
    }

    /// The options, checked as a URL's are; errors name the option as a
    /// URL would give it.
    pub(crate) fn check(self) -> Result<(CommonOptions, Option<ReplicaWait>)> {
        let common = CommonOptions::new(
            self.prefix,
            self.timeout,
            self.connect_timeout,
            self.allow_eviction,
        )?;
        Ok((common, self.wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_as_a_url_is() {
        let (common, wait) = RedisOptions::new()
            .prefix("svc:")
            .allow_eviction(true)
            .wait_replicas(2, Duration::from_millis(300))
            .check()
            .unwrap();
        assert_eq!(common.prefix, "svc:");
        assert!(common.allow_eviction);
        assert_eq!(common.timeout, NodeConfig::DEFAULT_TIMEOUT);
        assert_eq!(wait.map(|w| w.replicas), Some(2));
        let defaults = RedisOptions::new().check().unwrap().0;
        assert_eq!(defaults.prefix, CommonOptions::DEFAULT_PREFIX);
        for (options, expected) in [
            (RedisOptions::new().prefix("a b"), "prefix"),
            (RedisOptions::new().prefix("a#"), "prefix"),
            (RedisOptions::new().timeout(Duration::ZERO), "\"timeout\""),
            (
                RedisOptions::new().connect_timeout(Duration::ZERO),
                "connect_timeout",
            ),
        ] {
            let err = options.check().unwrap_err();
            assert!(
                err.is_invalid_input() && err.to_string().contains(expected),
                "{err}"
            );
        }
    }
}
