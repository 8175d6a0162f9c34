//! The few memcached meta-protocol commands distlock needs (memcached 1.6+),
//! over a small pool of plain TCP connections.
//!
//! The classic text protocol has no conditional delete; the meta protocol
//! does (`md key C<cas>`), and a conditional set (`ms … C<cas>`).
//!
//! A connection is taken out of the pool for one exchange and put back only
//! once that exchange read its whole reply. If the request fails, times out,
//! or its future is dropped between the write and the read (a cancelled
//! call), the connection is dropped with it: its reply would otherwise be
//! read by the next request, and an `add` that read a stale `HD` would report
//! a grant. Every request also carries an opaque token that the reply must
//! echo, so a reply out of step is an error, never an answer.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lock_core::{Error, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout, timeout_at};

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

type Connection = BufReader<TcpStream>;

/// A pool of meta-protocol connections to one memcached.
#[derive(Debug)]
pub struct MetaClient {
    addr: String,
    /// Open connections not in use, none with a reply left unread.
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection that may be open at once.
    permits: Semaphore,
    opaque: AtomicU32,
    timeout: Duration,
    connect_timeout: Duration,
}

impl MetaClient {
    /// A client for `addr` (`host:port`) with up to `pool_size` connections,
    /// made on first use. A request waits for a free connection and its reply
    /// within `timeout`; making a connection has `connect_timeout` of its own.
    pub fn new(
        addr: String,
        pool_size: usize,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        let pool_size = pool_size.max(1);
        Self {
            addr,
            idle: Mutex::new(Vec::with_capacity(pool_size)),
            permits: Semaphore::new(pool_size),
            opaque: AtomicU32::new(0),
            timeout,
            connect_timeout,
        }
    }

    fn unavailable(&self, what: String) -> Error {
        Error::Unavailable {
            backend: crate::NAME,
            message: format!("{} ({what})", self.addr),
            source: None,
        }
    }

    async fn connect(&self) -> Result<Connection> {
        let stream = timeout(self.connect_timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| Error::timeout("connecting to memcached", self.connect_timeout))?
            .map_err(|e| self.unavailable(format!("connect: {e}")))?;
        let _ = stream.set_nodelay(true);
        Ok(BufReader::new(stream))
    }

    /// Sends one request (and its data block) and reads the reply.
    async fn request(
        &self,
        operation: &'static str,
        line: &str,
        data: Option<&[u8]>,
    ) -> Result<Reply> {
        let timed_out = || Error::timeout(operation, self.timeout);
        // Waiting for a free connection counts against the timeout.
        let mut deadline = Instant::now() + self.timeout;
        let _permit = timeout_at(deadline, self.permits.acquire())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| Error::backend("the memcached connection pool was closed"))?;
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        // Owned by this future from here on: dropped with it if the exchange
        // does not finish, so a half-read connection never goes back.
        let mut conn = match idle {
            Some(conn) => conn,
            None => {
                let started = Instant::now();
                let conn = self.connect().await?;
                // Connecting is bounded by its own timeout.
                deadline += started.elapsed();
                conn
            }
        };
        let opaque = self.opaque.fetch_add(1, Ordering::Relaxed).to_string();
        let reply = match timeout_at(deadline, exchange(&mut conn, line, &opaque, data)).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => return Err(self.unavailable(format!("{operation}: {e}"))),
            Err(_) => return Err(timed_out()),
        };
        match reply.status() {
            // What the server does with the rest of a refused request is not
            // ours to guess: the connection goes.
            "CLIENT_ERROR" | "SERVER_ERROR" | "ERROR" => Err(Error::backend(format!(
                "memcached refused {operation}: {}",
                reply.tokens.join(" ")
            ))),
            _ if reply.flag('O') != Some(opaque.as_str()) => Err(self.unavailable(format!(
                "{operation}: the reply {:?} is not this request's",
                reply.status()
            ))),
            _ => {
                self.idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(conn);
                Ok(reply)
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

/// Writes `line` with the opaque flag `O<opaque>` (and the data block), and
/// reads one reply.
async fn exchange(
    conn: &mut Connection,
    line: &str,
    opaque: &str,
    data: Option<&[u8]>,
) -> std::io::Result<Reply> {
    let mut request =
        Vec::with_capacity(line.len() + opaque.len() + 4 + data.map_or(0, |d| d.len() + 2));
    request.extend_from_slice(line.as_bytes());
    request.extend_from_slice(b" O");
    request.extend_from_slice(opaque.as_bytes());
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
