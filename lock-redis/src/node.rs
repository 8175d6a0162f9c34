//! One Redis server: its connection and the lock operations on it
//! (`node/connect.rs` makes and checks it, `node/ops.rs` runs the
//! mutex's operations and the election's that are the mutex's;
//! `group.rs` the semaphore's and read-write lock's, `election.rs` the
//! election's own).
//! Redlock runs the same operations on each of its nodes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, Result};
use redis::{Client, RedisError};

use crate::config::sentinel::SentinelConfig;
use crate::conn::{Conn, SentinelConn};
use crate::error::convert;
use crate::eviction::Eviction;
#[cfg(feature = "raw")]
pub use crate::keys::MutexKeys;
pub use crate::keys::{Keys, mutex_like};

mod connect;
mod ops;

/// A connection to one Redis server that reconnects by itself, with a
/// response timeout on every command.
#[derive(Clone)]
pub struct Node {
    conn: Conn,
    /// Where more connections to the same server come from.
    source: Source,
    keys: Keys,
    label: String,
    timeout: Duration,
    connect_timeout: Duration,
    eviction: Eviction,
    /// This client's mark on the waiters it registers to be admitted (see
    /// [`Node::leave`]): a release that admits only its own client's
    /// waiters hands them their grants itself and announces nothing.
    client: String,
}

/// Where a node's connections come from.
#[derive(Clone)]
enum Source {
    /// One server's client.
    Single(Client),
    /// A cluster: its one connection routes every command.
    Cluster,
    /// The master that these sentinels name.
    Sentinel(Arc<SentinelConn>, SentinelConfig),
}

/// A client of the server that releases are announced on, for a
/// subscription connection: one server's, or the master Sentinel names
/// now.
#[derive(Clone)]
pub(crate) enum SubscribeTo {
    Single(Box<Client>),
    Sentinel(Arc<SentinelConn>),
}

impl SubscribeTo {
    /// The client to subscribe through now.
    pub(crate) async fn client(&self) -> Result<Client> {
        match self {
            SubscribeTo::Single(client) => Ok((**client).clone()),
            SubscribeTo::Sentinel(sentinel) => sentinel.master_client().await,
        }
    }
}

/// What [`Node::holder`] found.
#[derive(Debug)]
pub struct NodeHolder {
    /// The lock key's value: an owner token, or whatever another client set.
    pub owner: String,
    /// Time left on the key.
    pub remaining: Duration,
    /// The fence counter now: the token of the latest grant.
    pub counter: u64,
    /// An election's: the value its leader proclaims.
    pub value: Option<String>,
}

impl Node {
    /// Which keys the server may evict, as read at connect (a server whose
    /// policy changes later is not noticed).
    pub fn eviction(&self) -> Eviction {
        self.eviction
    }

    /// Whether this node follows a failover to a replica (a cluster's
    /// slots, the master Sentinel names), which may lack the last writes.
    pub(crate) fn fails_over(&self) -> bool {
        !matches!(self.source, Source::Single(_))
    }

    /// Where a subscription to release notices connects; `None` for a
    /// cluster, whose notices go by shard channel.
    pub(crate) fn subscribe_to(&self) -> Option<SubscribeTo> {
        match &self.source {
            Source::Single(client) => Some(SubscribeTo::Single(Box::new(client.clone()))),
            Source::Sentinel(sentinel, _) => Some(SubscribeTo::Sentinel(sentinel.clone())),
            Source::Cluster => None,
        }
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// This client's mark on the waiters it registers to be admitted.
    pub(crate) fn client(&self) -> &str {
        &self.client
    }

    /// `host:port`, for messages.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl Node {
    fn fail(&self, operation: &'static str, e: RedisError) -> Error {
        convert(&self.label, operation, self.timeout, e)
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client's connection info holds the password: never print it.
        let (server, keys) = (&self.label, &self.keys);
        write!(f, "Node {{ server: {server:?}, keys: {keys:?}, .. }}")
    }
}
