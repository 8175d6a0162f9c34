//! A loopback TCP proxy that injects network faults between a client and a
//! server: forward, stall every byte (both ways, or only the client's, at
//! once or after a few more requests), delay new connections or the
//! server's replies, or cut a
//! connection right after the server has answered a request (so the
//! request was applied but its reply is lost, or its reply arrives and the
//! connection is gone).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the proxy does with traffic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Pass everything through.
    None,
    /// Hold every byte in both directions (a hung server or network).
    Stall,
    /// Hold every byte the client sends; the server's still reach the
    /// client (a link broken one way).
    StallRequests,
    /// Forward the next `n` requests (client messages larger than a
    /// keep-alive ping), then hold every later byte the client sends: the
    /// fault turns into [`Fault::StallRequests`]. Holds a request that
    /// follows a read, to let another client write in between.
    StallRequestsAfter(u32),
    /// Forward the next request, then swallow the server's reply to it and
    /// close that connection; then go back to [`Fault::None`].
    DropNextReply,
    /// Forward the next request and the server's first reply to it, then
    /// close that connection; then go back to [`Fault::None`].
    CutAfterNextReply,
}

/// What the reply pump of one connection does with the next reply.
const PASS: u8 = 0;
const DROP: u8 = 1;
const DELIVER_THEN_CUT: u8 = 2;

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    fault: Arc<Mutex<Fault>>,
    connect_delay: Arc<Mutex<Duration>>,
    reply_delay: Arc<Mutex<Duration>>,
    cuts: Arc<AtomicU64>,
    held: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Proxies a new loopback port to `127.0.0.1:target`.
    pub async fn start(target: u16) -> Self {
        let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Self::between(localhost, SocketAddr::new(localhost, target)).await
    }

    /// Proxies a new loopback port to `target` (a server the harness did not
    /// start may be elsewhere).
    pub async fn to(target: SocketAddr) -> Self {
        Self::between(IpAddr::V4(Ipv4Addr::LOCALHOST), target).await
    }

    /// Proxies a new port on `listen` (a loopback address) to `target`.
    pub async fn between(listen: IpAddr, target: SocketAddr) -> Self {
        let listener = TcpListener::bind((listen, 0))
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let fault = Arc::new(Mutex::new(Fault::None));
        let connect_delay = Arc::new(Mutex::new(Duration::ZERO));
        let reply_delay = Arc::new(Mutex::new(Duration::ZERO));
        let counts = Counts::default();
        let (shared, delay, shared_counts) = (fault.clone(), connect_delay.clone(), counts.clone());
        let replies = reply_delay.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let fault = shared.clone();
                let counts = shared_counts.clone();
                let replies = replies.clone();
                let delay = *delay.lock().expect("poisoned");
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Ok(server) = TcpStream::connect(target).await {
                        relay(client, server, fault, replies, counts).await;
                    }
                });
            }
        });
        Self {
            addr,
            fault,
            connect_delay,
            reply_delay,
            cuts: counts.cuts,
            held: counts.held,
            accept,
        }
    }

    /// Holds each connection accepted from now on for `delay` before
    /// relaying a byte (a slow link or TLS handshake).
    pub fn set_connect_delay(&self, delay: Duration) {
        *self.connect_delay.lock().expect("poisoned") = delay;
    }

    /// Holds every reply of the server for `delay` before relaying it, on
    /// every connection, from now on (a slow server: each round trip takes
    /// `delay` longer; replies read together wait together, and those
    /// read after them wait their turn).
    pub fn set_reply_delay(&self, delay: Duration) {
        *self.reply_delay.lock().expect("poisoned") = delay;
    }

    /// How many connections a fault has cut so far.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::SeqCst)
    }

    /// How many messages (either way) a stall has held so far, each counted
    /// once, when its hold begins.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// The port clients should connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Changes what the proxy does from now on.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().expect("poisoned") = fault;
    }

    /// What the proxy does now.
    pub fn fault(&self) -> Fault {
        *self.fault.lock().expect("poisoned")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Client messages up to this size are pings and the like (MySQL's
/// `COM_PING` is 5 bytes, PostgreSQL's `Sync` 5), not requests.
const PING_SIZE: usize = 16;

/// What the relays of one proxy count.
#[derive(Clone, Default)]
struct Counts {
    cuts: Arc<AtomicU64>,
    held: Arc<AtomicU64>,
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    fault: Arc<Mutex<Fault>>,
    reply_delay: Arc<Mutex<Duration>>,
    counts: Counts,
) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Set by the upstream pump when it forwards the request whose reply
    // ends this connection.
    let cut = Arc::new(AtomicU8::new(PASS));
    let upstream = pump(
        client_read,
        server_write,
        fault.clone(),
        Direction::Request(cut.clone()),
        counts.held.clone(),
    );
    let downstream = pump(
        server_read,
        client_write,
        fault,
        Direction::Reply(cut, counts.cuts, reply_delay),
        counts.held,
    );
    // When either direction ends, both sockets are dropped: the connection
    // is cut for both peers.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

enum Direction {
    Request(Arc<AtomicU8>),
    Reply(Arc<AtomicU8>, Arc<AtomicU64>, Arc<Mutex<Duration>>),
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    fault: Arc<Mutex<Fault>>,
    direction: Direction,
    held_count: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if held(&fault, &direction) {
            held_count.fetch_add(1, Ordering::SeqCst);
            while held(&fault, &direction) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        match &direction {
            Direction::Request(cut) if n > PING_SIZE => {
                let mut now = fault.lock().expect("poisoned");
                let then = match *now {
                    Fault::DropNextReply => DROP,
                    Fault::CutAfterNextReply => DELIVER_THEN_CUT,
                    Fault::StallRequestsAfter(left) => {
                        *now = match left {
                            0 | 1 => Fault::StallRequests,
                            _ => Fault::StallRequestsAfter(left - 1),
                        };
                        PASS
                    }
                    Fault::None | Fault::Stall | Fault::StallRequests => PASS,
                };
                if then != PASS {
                    *now = Fault::None;
                    cut.store(then, Ordering::SeqCst);
                }
            }
            Direction::Reply(cut, cuts, delay) => match cut.load(Ordering::SeqCst) {
                DROP => {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                DELIVER_THEN_CUT => {
                    let _ = to.write_all(&buf[..n]).await;
                    cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                _ => {
                    let delay = *delay.lock().expect("poisoned");
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                }
            },
            _ => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Whether bytes going `direction` are held now.
fn held(fault: &Mutex<Fault>, direction: &Direction) -> bool {
    match *fault.lock().expect("poisoned") {
        Fault::Stall => true,
        Fault::StallRequests | Fault::StallRequestsAfter(0) => {
            matches!(direction, Direction::Request(_))
        }
        Fault::None
        | Fault::StallRequestsAfter(_)
        | Fault::DropNextReply
        | Fault::CutAfterNextReply => false,
    }
}
