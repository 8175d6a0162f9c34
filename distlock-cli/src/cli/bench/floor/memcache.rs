//! The floor of `memcache://`: the meta-protocol add (`ms key len T<s> ME`)
//! and a plain delete (`md key`), on a pool of TCP connections as large as
//! lock-memcache's, with its timeouts. No counter, no compare-and-delete.

use std::time::Duration;

use distlock::backend::OwnerToken;
use distlock::backend::{QueryOptions, async_trait};
use distlock::{Error, Result};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::primitive::Floor;

// lock-memcache's defaults for the options the URL leaves out.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
const DEFAULT_POOL_SIZE: usize = 4;

/// Round-robin connections to the library's server, made on first use.
pub(super) struct MemcacheFloor {
    addr: String,
    conns: Vec<Mutex<Option<BufReader<TcpStream>>>>,
    next: std::sync::atomic::AtomicUsize,
    timeout: Duration,
    connect_timeout: Duration,
}

/// A key added by an owner.
pub(super) struct MemcacheGrant {
    key: String,
}

impl MemcacheFloor {
    /// The server and pool settings lock-memcache takes from the same URL.
    pub(super) fn open(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("memcache://")
            .ok_or_else(|| Error::invalid_url(url, "expected memcache://HOST:PORT"))?;
        let addr = rest.split(['?', '/']).next().unwrap_or_default();
        let addr = if addr.contains(':') {
            addr.to_owned()
        } else {
            format!("{addr}:11211")
        };
        let mut query = QueryOptions::parse(url)?;
        let timeout = query.take_duration("timeout")?.unwrap_or(DEFAULT_TIMEOUT);
        let connect_timeout = query
            .take_duration("connect_timeout")?
            .unwrap_or(DEFAULT_TIMEOUT);
        let pool_size: usize = query
            .take_parsed("pool_size", "a whole number")?
            .unwrap_or(DEFAULT_POOL_SIZE);
        Ok(Self {
            addr,
            conns: (0..pool_size.max(1)).map(|_| Mutex::new(None)).collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
            timeout,
            connect_timeout,
        })
    }

    fn unavailable(&self, what: String) -> Error {
        Error::unavailable("memcache", format!("floor: {} ({what})", self.addr))
    }

    /// Sends `request` (lines with their `\r\n`) and reads the status line.
    async fn request(&self, request: &[u8]) -> Result<String> {
        use std::sync::atomic::Ordering;
        let slot = &self.conns[self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()];
        let mut guard = slot.lock().await;
        if guard.is_none() {
            let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.addr))
                .await
                .map_err(|_| Error::timeout("connecting to memcached", self.connect_timeout))?
                .map_err(|e| self.unavailable(format!("connect: {e}")))?;
            let _ = stream.set_nodelay(true);
            *guard = Some(BufReader::new(stream));
        }
        let Some(conn) = guard.as_mut() else {
            return Err(self.unavailable("no connection".into()));
        };
        let exchange = async {
            conn.get_mut().write_all(request).await?;
            let mut line = String::new();
            conn.read_line(&mut line).await?;
            std::io::Result::Ok(line)
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(line)) if !line.is_empty() => Ok(line.trim_end().to_owned()),
            Ok(Ok(_)) => {
                *guard = None;
                Err(self.unavailable("connection closed".into()))
            }
            Ok(Err(e)) => {
                *guard = None;
                Err(self.unavailable(e.to_string()))
            }
            Err(_) => {
                *guard = None;
                Err(Error::timeout("memcached request", self.timeout))
            }
        }
    }
}

#[async_trait]
impl Floor for MemcacheFloor {
    type Grant = MemcacheGrant;

    fn describe(&self) -> String {
        format!(
            "meta protocol on {} pooled TCP connections: ms key len T<ttl s> ME (add), then \
             md key (plain delete)",
            self.conns.len()
        )
    }

    async fn try_acquire(
        &self,
        name: &str,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<MemcacheGrant>> {
        let key = format!("distlock-bench-floor:{name}");
        let owner = owner.to_hex();
        let seconds = ttl.as_secs().max(1);
        let request = format!("ms {key} {} T{seconds} ME\r\n{owner}\r\n", owner.len());
        match self.request(request.as_bytes()).await?.as_str() {
            "HD" => Ok(Some(MemcacheGrant { key })),
            "NS" => Ok(None),
            other => Err(Error::backend(format!("floor add: memcached said {other}"))),
        }
    }

    async fn release(&self, grant: &MemcacheGrant) -> Result<()> {
        let request = format!("md {}\r\n", grant.key);
        match self.request(request.as_bytes()).await?.as_str() {
            "HD" => Ok(()),
            "NF" => Err(Error::not_held(grant.key.clone())),
            other => Err(Error::backend(format!(
                "floor delete: memcached said {other}"
            ))),
        }
    }
}
