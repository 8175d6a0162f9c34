//! The few memcached meta-protocol commands distlock needs (memcached 1.6+),
//! over a small pool of connections (plain TCP, or TLS).
//!
//! The classic text protocol has no conditional delete; the meta protocol
//! does (`md key C<cas>`), and a conditional set (`ms … C<cas>`).
//!
//! A connection is taken out of the pool for one exchange (one command, or a
//! few written at once) and put back only once that exchange read every
//! reply. If a request fails, is refused, times out, or its future is
//! dropped between the write and the last read (a cancelled call), the
//! connection is dropped with it: its replies would otherwise be read by the
//! next request, and an `add` that read a stale `HD` would report a grant.
//! Every command also carries an opaque token that its reply must echo, so
//! a reply out of step is an error, never an answer.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lock_core::{Error, Result};

use crate::stream::{Stream, dial};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_rustls::TlsConnector;

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

type Connection = BufReader<Stream>;

/// A pool of meta-protocol connections to one memcached.
pub struct MetaClient {
    addr: String,
    /// Handshakes with the server, for a server that takes TLS.
    tls: Option<TlsConnector>,
    /// Open connections not in use, none with a reply left unread.
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection that may be open at once.
    permits: Semaphore,
    opaque: AtomicU32,
    timeout: Duration,
    connect_timeout: Duration,
}

impl std::fmt::Debug for MetaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaClient")
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl MetaClient {
    /// A client for `addr` (`host:port`) with up to `pool_size` connections,
    /// made on first use, over TLS when `tls` is given. A request waits for
    /// a free connection and its reply within `timeout`; making a
    /// connection, handshake included, has `connect_timeout` of its own.
    pub fn new(
        addr: String,
        tls: Option<TlsConnector>,
        pool_size: usize,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        let pool_size = pool_size.max(1);
        Self {
            addr,
            tls,
            idle: Mutex::new(Vec::with_capacity(pool_size)),
            permits: Semaphore::new(pool_size),
            opaque: AtomicU32::new(0),
            timeout,
            connect_timeout,
        }
    }

    fn unavailable(&self, what: String) -> Error {
        Error::unavailable(crate::NAME, format!("{} ({what})", self.addr))
    }

    async fn connect(&self) -> Result<Connection> {
        let stream = timeout(self.connect_timeout, dial(&self.addr, self.tls.as_ref()))
            .await
            .map_err(|_| Error::timeout("connecting to memcached", self.connect_timeout))?
            .map_err(|e| match e.kind() {
                // A certificate refused by either side: trying again does
                // not help.
                std::io::ErrorKind::InvalidData => Error::backend(format!(
                    "{}: TLS handshake with {} failed: {e}",
                    crate::NAME,
                    self.addr
                ))
                .with_source(e),
                _ => self.unavailable(format!("connect: {e}")),
            })?;
        Ok(BufReader::new(stream))
    }

    /// The error for a failed read or write on a connection.
    fn broken(&self, operation: &str, e: std::io::Error) -> Error {
        use std::io::ErrorKind::{ConnectionReset, InvalidData, UnexpectedEof};
        if e.kind() == InvalidData && self.tls.is_some() {
            // TLS 1.3 servers refuse a client certificate after the
            // handshake, with an alert read here; retrying will not help.
            return Error::backend(format!(
                "{}: {operation} on {}: TLS: {e}",
                crate::NAME,
                self.addr
            ))
            .with_source(e);
        }
        let hint = match (&self.tls, e.kind()) {
            (None, UnexpectedEof | ConnectionReset) => {
                "; a server that takes TLS only closes plain connections: add tls=true"
            }
            _ => "",
        };
        self.unavailable(format!("{operation}: {e}{hint}"))
    }

    /// Sends one request (and its data block) and reads the reply.
    async fn request(
        &self,
        operation: &'static str,
        line: &str,
        data: Option<&[u8]>,
    ) -> Result<Reply> {
        let mut replies = self.pipeline(operation, &[(line, data)]).await?;
        Ok(replies.remove(0))
    }

    /// Sends `commands` (each a line and its data block) in one write on one
    /// connection, then reads their replies: one round trip. memcached runs
    /// one connection's commands in the order sent, though other
    /// connections' commands may run in between.
    ///
    /// The connection goes back to the pool only once every reply was read
    /// and is well-formed and in step; on anything else it is dropped, so a
    /// later request can never read a reply left over from this one.
    async fn pipeline(
        &self,
        operation: &'static str,
        commands: &[(&str, Option<&[u8]>)],
    ) -> Result<Vec<Reply>> {
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
        let count = u32::try_from(commands.len()).unwrap_or(u32::MAX);
        let first = self.opaque.fetch_add(count, Ordering::Relaxed);
        let opaques: Vec<String> = (0..count)
            .map(|i| first.wrapping_add(i).to_string())
            .collect();
        let request = encode(commands, &opaques);
        let exchange = async {
            let io = |e: std::io::Error| self.broken(operation, e);
            conn.get_mut().write_all(&request).await.map_err(io)?;
            // TLS may hold written bytes back until a flush.
            conn.get_mut().flush().await.map_err(io)?;
            let mut replies = Vec::with_capacity(commands.len());
            for opaque in &opaques {
                let reply = read_reply(&mut conn).await.map_err(io)?;
                // A refused or out-of-step reply ends the exchange here: what
                // follows it on the wire is not ours to guess.
                self.check(operation, &reply, opaque)?;
                replies.push(reply);
            }
            Ok(replies)
        };
        let replies = timeout_at(deadline, exchange)
            .await
            .map_err(|_| timed_out())??;
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
        Ok(replies)
    }

    /// A refused request, or a reply that does not echo `opaque`, is an error.
    fn check(&self, operation: &str, reply: &Reply, opaque: &str) -> Result<()> {
        match reply.status() {
            "CLIENT_ERROR" | "SERVER_ERROR" | "ERROR" => Err(Error::backend(format!(
                "memcached refused {operation}: {}",
                reply.tokens.join(" ")
            ))),
            _ if reply.flag('O') != Some(opaque) => Err(self.unavailable(format!(
                "{operation}: the reply {:?} is not this request's",
                reply.status()
            ))),
            _ => Ok(()),
        }
    }

    /// `add` (store `value` at `key` only if absent), then an increment of the
    /// counter at `counter` (created with `seed` if missing), then a read of
    /// `key`, in one round trip and in that order. Returns the add's outcome
    /// (with the new item's CAS), the counter's new value, and the item at
    /// `key` as the read found it.
    ///
    /// The counter moves even when the add is refused.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub async fn add_then_increment(
        &self,
        key: &str,
        value: &str,
        exptime: u64,
        counter: &str,
        seed: u64,
    ) -> Result<(Write, u64, Option<Item>)> {
        let (added, counted, mut read) = self
            .add_then_increment_reading(key, value, exptime, counter, seed, &[key])
            .await?;
        Ok((added, counted, read.pop().flatten()))
    }

    /// [`add_then_increment`](Self::add_then_increment) with the read of
    /// every key of `reads` instead of `key` alone, in the same round trip
    /// and in that order: the items as they were right behind the add.
    pub async fn add_then_increment_reading(
        &self,
        key: &str,
        value: &str,
        exptime: u64,
        counter: &str,
        seed: u64,
        reads: &[&str],
    ) -> Result<(Write, u64, Vec<Option<Item>>)> {
        let add = format!("ms {key} {} T{exptime} ME c", value.len());
        let increment = increment_line(counter, seed);
        let lines: Vec<String> = reads.iter().map(|key| peek_line(key)).collect();
        let mut commands: Vec<(&str, Option<&[u8]>)> =
            vec![(&add, Some(value.as_bytes())), (&increment, None)];
        commands.extend(lines.iter().map(|line| (line.as_str(), None)));
        let replies = self.pipeline("add", &commands).await?;
        let [added, counted, read @ ..] = replies.as_slice() else {
            return Err(Error::backend("memcached answered a pipeline short"));
        };
        Ok((
            written(added)?,
            counter_value(counted)?,
            read.iter().map(item).collect(),
        ))
    }

    /// The items at `keys`, read in one round trip and without bumping them
    /// in the LRU, as the read behind an add.
    pub async fn peek_all(&self, keys: &[&str]) -> Result<Vec<Option<Item>>> {
        let lines: Vec<String> = keys.iter().map(|key| peek_line(key)).collect();
        let commands: Vec<(&str, Option<&[u8]>)> =
            lines.iter().map(|line| (line.as_str(), None)).collect();
        let replies = self.pipeline("read", &commands).await?;
        Ok(replies.iter().map(item).collect())
    }

    /// The item at `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<Item>> {
        Ok(item(&self.request("get", &get_line(key), None).await?))
    }

    /// Sets `key` to `value` with a new expiry only if its CAS is still
    /// `cas`.
    pub async fn set_if(&self, key: &str, value: &str, exptime: u64, cas: u64) -> Result<Write> {
        let line = format!("ms {key} {} T{exptime} C{cas} c", value.len());
        let reply = self
            .request("compare-and-set", &line, Some(value.as_bytes()))
            .await?;
        written(&reply)
    }

    /// Deletes `key` only if its CAS is still `cas`.
    pub async fn delete_if(&self, key: &str, cas: u64) -> Result<Write> {
        let reply = self
            .request("compare-and-delete", &format!("md {key} C{cas}"), None)
            .await?;
        written(&reply)
    }

    /// Increments the counter at `key`, creating it with `seed` (and no
    /// expiry) if it is missing; returns the new value.
    pub async fn increment_or_seed(&self, key: &str, seed: u64) -> Result<u64> {
        counter_value(
            &self
                .request("increment", &increment_line(key, seed), None)
                .await?,
        )
    }
}

/// How a write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Applied (`HD`); the item's new CAS, `0` where the command returns
    /// none (a delete).
    Applied(u64),
    /// Not applied: an add found the key taken (`NS`).
    NotStored,
    /// Not applied: the item's CAS is not the one given (`EX`).
    Changed,
    /// Not applied: no item at the key (`NF`).
    Missing,
}

impl Write {
    /// The new CAS, if the write applied.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub fn applied(self) -> Option<u64> {
        match self {
            Self::Applied(cas) => Some(cas),
            Self::NotStored | Self::Changed | Self::Missing => None,
        }
    }
}

fn get_line(key: &str) -> String {
    format!("mg {key} v c t")
}

/// A read that comes with every attempt, however many: `u` keeps it from
/// bumping the item in the LRU, since memcached shelters an item fetched
/// twice from eviction, and a lock read by its waiters would stay in the
/// cache longer than one nobody waits for.
fn peek_line(key: &str) -> String {
    format!("mg {key} v c t u")
}

fn increment_line(key: &str, seed: u64) -> String {
    format!("ma {key} N0 J{seed} v")
}

fn item(reply: &Reply) -> Option<Item> {
    if reply.status() != "VA" {
        return None;
    }
    let value = String::from_utf8_lossy(reply.data.as_deref().unwrap_or_default()).into_owned();
    let cas = reply.flag('c').and_then(|c| c.parse().ok()).unwrap_or(0);
    let ttl = reply
        .flag('t')
        .and_then(|t| t.parse::<i64>().ok())
        .and_then(|t| u64::try_from(t).ok());
    Some(Item { value, cas, ttl })
}

fn counter_value(reply: &Reply) -> Result<u64> {
    let data = reply.data.as_deref().unwrap_or_default();
    String::from_utf8_lossy(data).trim().parse().map_err(|_| {
        Error::backend(format!(
            "memcached answered an increment with {:?}",
            reply.tokens
        ))
    })
}

fn written(reply: &Reply) -> Result<Write> {
    match reply.status() {
        "HD" => Ok(Write::Applied(
            reply.flag('c').and_then(|c| c.parse().ok()).unwrap_or(0),
        )),
        "NS" => Ok(Write::NotStored),
        "EX" => Ok(Write::Changed),
        "NF" => Ok(Write::Missing),
        other => Err(Error::backend(format!(
            "unexpected memcached reply \"{other}\""
        ))),
    }
}

/// The commands, each line with its opaque flag `O<opaque>` and followed by
/// its data block, in one buffer.
fn encode(commands: &[(&str, Option<&[u8]>)], opaques: &[String]) -> Vec<u8> {
    let mut request = Vec::with_capacity(
        commands
            .iter()
            .map(|(line, data)| line.len() + 16 + data.map_or(0, |d| d.len() + 2))
            .sum(),
    );
    for ((line, data), opaque) in commands.iter().zip(opaques) {
        request.extend_from_slice(line.as_bytes());
        request.extend_from_slice(b" O");
        request.extend_from_slice(opaque.as_bytes());
        request.extend_from_slice(b"\r\n");
        if let Some(d) = data {
            request.extend_from_slice(d);
            request.extend_from_slice(b"\r\n");
        }
    }
    request
}

/// Reads one reply: its status line and, for `VA`, its data block.
async fn read_reply(conn: &mut Connection) -> std::io::Result<Reply> {
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
