//! What the server's memory policy may do to lock keys.
//!
//! A Redis with `maxmemory` set and any policy but `noeviction` deletes keys
//! under memory pressure. Lock keys carry a TTL, so every `volatile-*` policy
//! picks among them first, and an `allkeys-*` policy may pick them too: a
//! lock key evicted while its holder works is a lock granted a second time.

use lock_core::{Error, Result};

/// Which of distlock's keys the server may evict, as read at connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// `maxmemory` is 0 or the policy is `noeviction`: keys go only when
    /// they expire or are deleted.
    Never,
    /// A `volatile-*` policy: keys with a TTL — lock keys — may be evicted;
    /// the fence counters, which have none, may not.
    KeysWithTtl,
    /// An `allkeys-*` policy, or one this version does not know: any key,
    /// fence counters included.
    AnyKey,
    /// The server would not say (`INFO` and `CONFIG GET` both refused, as
    /// for an ACL user without them or a managed service that renames
    /// them). Treated as [`Eviction::Never`], with a warning at connect.
    Unknown,
}

/// `maxmemory` and `maxmemory-policy` as the server reported them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MemoryPolicy {
    maxmemory: u64,
    policy: String,
}

impl MemoryPolicy {
    /// From the `# Memory` section of `INFO`.
    pub(crate) fn from_info(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        Some(Self {
            maxmemory: field("maxmemory")?.parse().ok()?,
            policy: field("maxmemory_policy")?.to_owned(),
        })
    }

    /// From the name/value pairs of `CONFIG GET maxmemory maxmemory-policy`.
    pub(crate) fn from_config(pairs: &[String]) -> Option<Self> {
        let value = |name: &str| {
            pairs
                .chunks_exact(2)
                .find(|pair| pair[0].eq_ignore_ascii_case(name))
                .map(|pair| pair[1].trim())
        };
        Some(Self {
            maxmemory: value("maxmemory")?.parse().ok()?,
            policy: value("maxmemory-policy")?.to_owned(),
        })
    }

    fn eviction(&self) -> Eviction {
        if self.maxmemory == 0 || self.policy == "noeviction" {
            Eviction::Never
        } else if self.policy.starts_with("volatile-") {
            Eviction::KeysWithTtl
        } else {
            Eviction::AnyKey
        }
    }
}

/// Decides whether distlock may use `server`: refuses one that may evict
/// lock keys unless the URL says `allow_eviction=true`, and warns when it
/// proceeds without knowing or with the risk accepted.
impl Eviction {
    /// The more evicting of two servers' policies, for a cluster whose
    /// masters may differ: a key may go if any master may evict it.
    pub(crate) fn max_with(self, other: Eviction) -> Eviction {
        let rank = |e: Eviction| match e {
            Eviction::Unknown => 0,
            Eviction::Never => 1,
            Eviction::KeysWithTtl => 2,
            Eviction::AnyKey => 3,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

pub(crate) fn admit(
    server: &str,
    allow_eviction: bool,
    found: Option<&MemoryPolicy>,
) -> Result<Eviction> {
    let Some(found) = found else {
        if !allow_eviction {
            tracing::warn!(
                server,
                "cannot read maxmemory-policy (INFO and CONFIG GET refused); assuming the server \
                 never evicts keys — if it may (maxmemory with a policy other than noeviction), a \
                 held lock can be dropped and granted again"
            );
        }
        return Ok(Eviction::Unknown);
    };
    let eviction = found.eviction();
    if eviction == Eviction::Never {
        return Ok(eviction);
    }
    let MemoryPolicy { maxmemory, policy } = found;
    if !allow_eviction {
        return Err(Error::backend(format!(
            "{server} may evict lock keys (maxmemory {maxmemory} bytes, maxmemory-policy \
                 {policy}): a held lock whose key is evicted is granted again. Set \
                 maxmemory-policy to noeviction on that server, or add allow_eviction=true to \
                 the URL (RedisConfig::allow_eviction in code) to accept the \
                 risk"
        )));
    }
    tracing::warn!(
        server,
        maxmemory,
        policy = policy.as_str(),
        "this server may evict lock keys (allowed by allow_eviction=true): a held lock whose key \
         is evicted is granted again"
    );
    Ok(eviction)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(maxmemory: u64, policy: &str) -> Eviction {
        MemoryPolicy {
            maxmemory,
            policy: policy.to_owned(),
        }
        .eviction()
    }

    #[test]
    fn only_a_limit_with_an_evicting_policy_evicts() {
        assert_eq!(policy(0, "allkeys-lru"), Eviction::Never);
        assert_eq!(policy(1 << 20, "noeviction"), Eviction::Never);
        assert_eq!(policy(1 << 20, "volatile-ttl"), Eviction::KeysWithTtl);
        assert_eq!(policy(1 << 20, "allkeys-lfu"), Eviction::AnyKey);
        assert_eq!(policy(1 << 20, "some-future-policy"), Eviction::AnyKey);
    }

    #[test]
    fn reads_info_and_config_replies() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory:1048576\r\nmaxmemory_human:1.00M\r\nmaxmemory_policy:allkeys-lru\r\n";
        let expected = MemoryPolicy {
            maxmemory: 1 << 20,
            policy: "allkeys-lru".to_owned(),
        };
        assert_eq!(MemoryPolicy::from_info(info), Some(expected));
        assert_eq!(MemoryPolicy::from_info("# Server\r\n"), None);
        let pairs = ["maxmemory-policy", "volatile-lru", "maxmemory", "0"].map(String::from);
        assert_eq!(
            MemoryPolicy::from_config(&pairs).map(|p| p.eviction()),
            Some(Eviction::Never)
        );
    }
}
