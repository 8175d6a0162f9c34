//! The few memcached meta-protocol commands distlock needs (memcached 1.6+),
//! over a small pool of plain TCP connections.
//!
//! The classic text protocol has no conditional delete; the meta protocol
//! does (`md key C<cas>`), and a conditional set (`ms … C<cas>`). Every
//! request has a timeout; a connection that failed or timed out is dropped
//! and made again on next use.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Error, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

/// A value with its CAS unique and remaining lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The stored value.
    pub value: String,
    /// The CAS unique: changes on every write of the key.
    pub cas: u64,
    /// Seconds left, `None` if it never expires.
    pub ttl: Option<u64>,
}

/// One reply: its status line's tokens, and the data block of a `VA` reply.
struct Reply {
    tokens: Vec<String>,
    data: Option<Vec<u8>>,
}

impl Reply {
    fn status(&self) -> &str {
        self.tokens.first().map_or("", String::as_str)
    }

    /// The value of flag `f` in the status line (`c123` → `123`).
    fn flag(&self, f: char) -> Option<&str> {
        self.tokens.iter().skip(1).find_map(|t| t.strip_prefix(f))
    }
}

/// A pool of meta-protocol connections to one memcached.
pub struct MetaClient {
    addr: String,
    conns: Vec<Mutex<Option<BufReader<TcpStream>>>>,
    next: AtomicUsize,
    timeout: Duration,
    connect_timeout: Duration,
}

impl MetaClient {
    /// A client for `addr` (`host:port`); connections are made on first use.
    pub fn new(
        addr: String,
        pool_size: usize,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            addr,
            conns: (0..pool_size.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            timeout,
            connect_timeout,
        }
    }

    fn unavailable(&self, what: String) -> Error {
        Error::Unavailable {
            backend: "memcache",
            message: format!("{} ({what})", self.addr),
            source: None,
        }
    }

    /// Sends one request (and its data block) and reads the reply.
    async fn request(
        &self,
        operation: &'static str,
        line: &str,
        data: Option<&[u8]>,
    ) -> Result<Reply> {
        let slot = &self.conns[self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()];
        let mut guard = slot.lock().await;
        if guard.is_none() {
            let connect =
                tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.addr));
            let stream = connect
                .await
                .map_err(|_| Error::Timeout {
                    operation: "connecting to memcached",
                    after: self.connect_timeout,
                })?
                .map_err(|e| self.unavailable(format!("connect: {e}")))?;
            let _ = stream.set_nodelay(true);
            *guard = Some(BufReader::new(stream));
        }
        let conn = guard
            .as_mut()
            .ok_or_else(|| self.unavailable("no connection".into()))?;
        let exchange = tokio::time::timeout(self.timeout, exchange(conn, line, data)).await;
        match exchange {
            Ok(Ok(reply)) => match reply.status() {
                "CLIENT_ERROR" | "SERVER_ERROR" | "ERROR" => Err(Error::backend(format!(
                    "memcached refused {operation}: {}",
                    reply.tokens.join(" ")
                ))),
                _ => Ok(reply),
            },
            Ok(Err(e)) => {
                *guard = None;
                Err(self.unavailable(format!("{operation}: {e}")))
            }
            Err(_) => {
                // The reply may still arrive: this connection is out of step.
                *guard = None;
                Err(Error::Timeout {
                    operation,
                    after: self.timeout,
                })
            }
        }
    }

    /// `add`: stores `value` only if `key` is absent. `true` if stored.
    pub async fn add(&self, key: &str, value: &str, exptime: u64) -> Result<bool> {
        let line = format!("ms {key} {} T{exptime} ME", value.len());
        let reply = self.request("add", &line, Some(value.as_bytes())).await?;
        stored(&reply)
    }

    /// The item at `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<Item>> {
        let reply = self
            .request("get", &format!("mg {key} v c t"), None)
            .await?;
        if reply.status() == "EN" {
            return Ok(None);
        }
        let value = String::from_utf8_lossy(reply.data.as_deref().unwrap_or_default()).into_owned();
        let cas = reply.flag('c').and_then(|c| c.parse().ok()).unwrap_or(0);
        let ttl = reply
            .flag('t')
            .and_then(|t| t.parse::<i64>().ok())
            .and_then(|t| u64::try_from(t).ok());
        Ok(Some(Item { value, cas, ttl }))
    }

    /// Sets `key` to `value` with a new expiry only if its CAS is still
    /// `cas`. `true` if stored.
    pub async fn set_if(&self, key: &str, value: &str, exptime: u64, cas: u64) -> Result<bool> {
        let line = format!("ms {key} {} T{exptime} C{cas}", value.len());
        let reply = self
            .request("compare-and-set", &line, Some(value.as_bytes()))
            .await?;
        stored(&reply)
    }

    /// Deletes `key` only if its CAS is still `cas`. `true` if deleted.
    pub async fn delete_if(&self, key: &str, cas: u64) -> Result<bool> {
        let reply = self
            .request("compare-and-delete", &format!("md {key} C{cas}"), None)
            .await?;
        Ok(reply.status() == "HD")
    }

    /// Increments the counter at `key`, creating it with `seed` (and no
    /// expiry) if it is missing; returns the new value.
    pub async fn increment_or_seed(&self, key: &str, seed: u64) -> Result<u64> {
        let reply = self
            .request("increment", &format!("ma {key} N0 J{seed} v"), None)
            .await?;
        let data = reply.data.as_deref().unwrap_or_default();
        String::from_utf8_lossy(data).trim().parse().map_err(|_| {
            Error::backend(format!(
                "memcached answered an increment with {:?}",
                reply.tokens
            ))
        })
    }
}

fn stored(reply: &Reply) -> Result<bool> {
    match reply.status() {
        "HD" => Ok(true),
        "NS" | "EX" | "NF" => Ok(false),
        other => Err(Error::backend(format!(
            "unexpected memcached reply \"{other}\""
        ))),
    }
}

async fn exchange(
    conn: &mut BufReader<TcpStream>,
    line: &str,
    data: Option<&[u8]>,
) -> std::io::Result<Reply> {
    let mut request = Vec::with_capacity(line.len() + 2 + data.map_or(0, |d| d.len() + 2));
    request.extend_from_slice(line.as_bytes());
    request.extend_from_slice(b"\r\n");
    if let Some(d) = data {
        request.extend_from_slice(d);
        request.extend_from_slice(b"\r\n");
    }
    conn.get_mut().write_all(&request).await?;
    let mut status = String::new();
    if conn.read_line(&mut status).await? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let tokens: Vec<String> = status.split_whitespace().map(str::to_owned).collect();
    let data = if tokens.first().map(String::as_str) == Some("VA") {
        let len: usize = tokens.get(1).and_then(|l| l.parse().ok()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "VA without a length")
        })?;
        let mut block = vec![0; len + 2];
        conn.read_exact(&mut block).await?;
        block.truncate(len);
        Some(block)
    } else {
        None
    };
    Ok(Reply { tokens, data })
}

impl fmt::Debug for MetaClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaClient")
            .field("addr", &self.addr)
            .field("pool_size", &self.conns.len())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
