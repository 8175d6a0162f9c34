//! The `etcd_client::Client` an [`EtcdConfig`] describes (its members,
//! credentials, timeouts and TLS), and `Core`: that client with the
//! request timeout every call is bounded by, and the plain requests the
//! protocol modules build on.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, ConnectOptions, Identity, TlsOptions, Txn, TxnOp, WatchOptions, WatchResponse,
    WatchStream,
};
use lock_core::tls::TlsMaterial;
use lock_core::{Error, Result};

use crate::EtcdConfig;
use crate::config::Settings;
use crate::error::convert;
use crate::mark::Mark;

/// Connects a client as [`EtcdBackend::connect_with`](crate::EtcdBackend::connect_with)
/// does, for tools that speak to the same cluster beside the backend (the
/// CLI's `bench` floor). The client connects lazily: an unreachable cluster
/// or a refused handshake shows at its first request. A TLS file that is
/// missing, unreadable or not what its option needs is an
/// [`Error::InvalidConfig`] naming etcd, the option and the path; so is a
/// field that fails the config's check.
pub async fn connect(config: &EtcdConfig) -> Result<Client> {
    config.check()?;
    let mut options = ConnectOptions::new()
        .with_timeout(config.timeout)
        .with_connect_timeout(config.connect_timeout)
        .with_keep_alive(Duration::from_secs(5), config.timeout);
    if let Some((user, password)) = &config.credentials {
        options = options.with_user(user.clone(), password.read(crate::NAME)?);
    }
    if let Some(material) = config.tls.load(crate::NAME)? {
        options = options.with_tls(tls_options(&material, config.connect_timeout)?);
    }
    let connect = Client::connect(config.endpoint_urls(), Some(options));
    tokio::time::timeout(config.connect_timeout, connect)
        .await
        .map_err(|_| Error::timeout("connecting to etcd", config.connect_timeout))?
        .map_err(|e| convert("connect", e))
}

/// tonic's TLS settings for `material`: the private CA's certificates, or
/// the public roots and the system's trust store (lock-core's root store,
/// so that a system without a trust store still has the public roots), and
/// the client certificate. The handshake must end within `handshake`.
fn tls_options(material: &TlsMaterial, handshake: Duration) -> Result<TlsOptions> {
    let roots = material.root_store()?;
    let mut tls = TlsOptions::new()
        .trust_anchors(roots.roots)
        .timeout(handshake);
    if let Some((cert, key)) = material.identity_pem() {
        // tonic would find a certificate that does not parse, or a key that
        // does not match it, only when it first connects, as a transport
        // error; rustls says which now.
        material.client_config()?;
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Ok(tls)
}

/// A backend's connection: the client and the checked settings (the key
/// prefix, and the timeout of each request). Cheap to clone; clones share
/// the client's connections.
#[derive(Clone)]
pub(crate) struct Core {
    client: Client,
    pub(crate) settings: Arc<Settings>,
}

impl Core {
    pub(crate) fn new(client: Client, settings: Settings) -> Self {
        Self {
            client,
            settings: Arc::new(settings),
        }
    }

    /// Runs one request within the timeout.
    pub(crate) async fn call<T, F, Fut>(&self, operation: &'static str, request: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        tokio::time::timeout(self.settings.timeout, request(self.client.clone()))
            .await
            .map_err(|_| Error::timeout(operation, self.settings.timeout))?
            .map_err(|e| convert(operation, e))
    }

    /// Deletes `key` if `mark` still shows it ours: one `Txn`, which
    /// touches nobody else's key even if two owner tokens ever shared the
    /// key's 63 bits.
    pub(crate) async fn leave(&self, key: &str, mark: &Mark) -> Result<()> {
        self.delete_if(key, mark.compare(key)).await.map(|_| ())
    }

    /// Deletes `key` if `compare` holds: one `Txn`; whether it did.
    pub(crate) async fn delete_if(&self, key: &str, compare: Compare) -> Result<bool> {
        let txn = Txn::new()
            .when([compare])
            .and_then([TxnOp::delete(key, None)]);
        self.call("delete our key", |mut c| async move { c.txn(txn).await })
            .await
            .map(|r| r.succeeded())
    }

    /// Deletes each of `keys` that `mark` still shows ours (see
    /// [`delete_each`](Self::delete_each)).
    pub(crate) async fn leave_all(&self, keys: &[String], mark: &Mark) -> Result<()> {
        if let [key] = keys {
            return self.leave(key, mark).await;
        }
        let deletes = keys.iter().map(|key| (key.clone(), mark.compare(key)));
        self.delete_each(deletes.collect()).await
    }

    /// Deletes each key whose compare holds: one `Txn`, its deletes nested
    /// so that each key is compared on its own (a missing one stops none
    /// of the others).
    pub(crate) async fn delete_each(&self, deletes: Vec<(String, Compare)>) -> Result<()> {
        let deletes = deletes.into_iter().map(|(key, compare)| {
            TxnOp::txn(
                Txn::new()
                    .when([compare])
                    .and_then([TxnOp::delete(key, None)]),
            )
        });
        let txn = Txn::new().and_then(deletes.collect::<Vec<_>>());
        self.call("delete our keys", |mut c| async move { c.txn(txn).await })
            .await
            .map(|_| ())
    }

    /// A watch of `key` (with `options`) from the next revision on, once
    /// etcd has confirmed it, and the store's revision when it did.
    pub(crate) async fn watch_from_now(
        &self,
        operation: &'static str,
        key: Vec<u8>,
        options: Option<WatchOptions>,
    ) -> Result<(WatchStream, i64)> {
        self.call(operation, |mut c| async move {
            let mut stream = c.watch(key, options).await?;
            loop {
                match stream.message().await? {
                    Some(m) if m.canceled() => {
                        return Err(etcd_client::Error::WatchError(format!(
                            "the watch was cancelled: {}",
                            m.cancel_reason()
                        )));
                    }
                    Some(m) if m.created() => {
                        let revision = m.header().map_or(0, |h| h.revision());
                        return Ok((stream, revision));
                    }
                    Some(_) => {}
                    None => {
                        return Err(etcd_client::Error::WatchError(
                            "the watch stream ended before it was created".into(),
                        ));
                    }
                }
            }
        })
        .await
    }

    /// One keep-alive, one round trip: whether the lease is still alive.
    /// etcd-client sends the first keep-alive as it opens the stream and
    /// waits for its answer, failing unless the TTL in it is above 0.
    pub(crate) async fn keep_alive(&self, lease: i64) -> Result<bool> {
        self.call("keep the lease alive", |mut c| async move {
            match c.lease_keep_alive(lease).await {
                Ok(_) => Ok(true),
                // The client's answer to a first reply without TTL: an
                // expired or revoked lease, not an outage. (Its only other
                // error of that kind, a send on the channel it has just
                // opened, cannot happen.)
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// The time left on `lease`, if etcd says.
    pub(crate) async fn lease_left(&self, lease: i64) -> Option<Duration> {
        self.call("read the lease", |mut c| async move {
            c.lease_time_to_live(lease, None).await
        })
        .await
        .ok()
        .map(|t| Duration::from_secs(u64::try_from(t.ttl()).unwrap_or(0)))
    }
}

/// The next message of a watch that runs on: a stream that failed
/// (`operation` names the watch), ended or was cancelled by etcd is an
/// `Unavailable` error, since each ends the watch.
pub(crate) async fn next_message(
    stream: &mut WatchStream,
    operation: &'static str,
) -> Result<WatchResponse> {
    let Some(message) = stream.message().await.map_err(|e| convert(operation, e))? else {
        return Err(Error::unavailable(crate::NAME, "the watch stream ended"));
    };
    if message.canceled() {
        return Err(Error::unavailable(
            crate::NAME,
            format!("the watch was cancelled: {}", message.cancel_reason()),
        ));
    }
    Ok(message)
}
