//! Ports for the servers the harness starts.
//!
//! A server gets all its ports in one [`reserve`]: each bound on the address
//! the server will listen on, all held at once, and none ever handed out
//! before by this process, so no two are the same. They come from below the
//! kernel's ephemeral range, where no outgoing connection and no `bind` to
//! port 0 (the fault proxies') can take one while it waits for its server.
//! Only another process that picks ports the same way can still take one
//! between the reservation and the server's own `bind`; [`start_on_free_ports`]
//! then starts the server again on new ports.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

use super::process::Supervised;

/// The lowest port handed out.
const FIRST: u16 = 10_000;

/// How many times a server that lost a port to another process is started
/// again on new ports.
const ATTEMPTS: usize = 5;

/// Every port this process has handed out, on any address.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Ports held bound until the server that will listen on them is about to
/// start.
#[derive(Debug)]
pub struct Reserved {
    held: Vec<TcpListener>,
}

impl Reserved {
    /// The ports, in the order of the addresses they were reserved on.
    pub fn ports(&self) -> Vec<u16> {
        self.held
            .iter()
            .map(|l| l.local_addr().expect("a bound address").port())
            .collect()
    }

    /// Lets the ports go, for the server to bind them.
    pub fn release(self) -> Vec<u16> {
        self.ports()
    }
}

/// One port on each of `addrs`, all distinct, bound and held until
/// [`Reserved::release`].
pub fn reserve(addrs: &[IpAddr]) -> Reserved {
    let (low, high) = range();
    let mut handed_out = HANDED_OUT.lock().expect("poisoned");
    let mut rng = rand::rng();
    let mut held = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let mut tries = 0;
        let listener = loop {
            tries += 1;
            assert!(
                tries <= 10_000,
                "no free port left in {low}..{high} on {addr}"
            );
            let port = rng.random_range(low..high);
            if handed_out.contains(&port) {
                continue;
            }
            if let Ok(listener) = TcpListener::bind((*addr, port)) {
                handed_out.insert(port);
                break listener;
            }
        };
        held.push(listener);
    }
    Reserved { held }
}

/// A loopback port nobody listens on, and no server of this process ever
/// will: for tests of an unreachable server.
pub fn unused_port() -> u16 {
    reserve(&[IpAddr::V4(Ipv4Addr::LOCALHOST)]).release()[0]
}

/// The ports below the kernel's ephemeral range (`ip_local_port_range`).
fn range() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    assert!(
        ephemeral_low > FIRST + 1_000,
        "the ephemeral port range starts at {ephemeral_low}: the harness needs ports \
         {FIRST}..{} outside it (sysctl net.ipv4.ip_local_port_range)",
        FIRST + 1_000
    );
    (FIRST, ephemeral_low)
}

/// A server that could not bind one of its ports: another process took it
/// after the reservation.
#[derive(Debug)]
pub struct PortTaken;

/// Starts a server on ports reserved on `addrs` (one per entry, in order),
/// and again on new ports if it lost one to another process. `start` starts
/// it and waits until it serves ([`wait_started`]); what it started is
/// dropped, and so stopped, before the next attempt.
pub async fn start_on_free_ports<T, F, Fut>(what: &str, addrs: &[IpAddr], mut start: F) -> T
where
    F: FnMut(Vec<u16>) -> Fut,
    Fut: Future<Output = Result<T, PortTaken>>,
{
    for _ in 0..ATTEMPTS {
        let ports = reserve(addrs).release();
        // Boxed: a caller awaiting several servers' starts in one future
        // would otherwise nest too deep for the compiler's layout queries.
        if let Ok(server) = Box::pin(start(ports)).await {
            return server;
        }
    }
    panic!("{what} lost one of its ports to another process {ATTEMPTS} times in a row")
}

/// [`start_on_free_ports`] on 127.0.0.1 only.
pub async fn start_on_loopback<T, F, Fut>(what: &str, ports: usize, start: F) -> T
where
    F: FnMut(Vec<u16>) -> Fut,
    Fut: Future<Output = Result<T, PortTaken>>,
{
    let addrs = vec![IpAddr::V4(Ipv4Addr::LOCALHOST); ports];
    start_on_free_ports(what, &addrs, start).await
}

/// A server process just started, and the ports it must listen on.
pub type Listener<'a> = (&'a Supervised, Vec<u16>);

/// Waits until each of `listeners` listens on its ports itself, and then
/// until `ready` returns true, polling every 100 ms. A process that exited
/// because a port was taken is [`PortTaken`]; one that exited for another
/// reason, or no readiness within `limit`, fails the test with the logs.
/// A port is ready only when the server's own process holds it: another
/// process that took it would answer the readiness check as well.
pub async fn wait_started<F, Fut>(
    what: &str,
    limit: Duration,
    listeners: &[Listener<'_>],
    mut ready: F,
) -> Result<(), PortTaken>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let logs = || {
        listeners
            .iter()
            .map(|(p, _)| p.log())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let mut listening = true;
        for (process, ports) in listeners {
            if process.exited() {
                let log = process.log();
                if log.to_ascii_lowercase().contains("already in use") {
                    return Err(PortTaken);
                }
                panic!("{what} exited while starting; its log:\n{log}");
            }
            listening &= listens_on(process.pid(), ports);
        }
        if listening && ready().await {
            return Ok(());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what} to start after {limit:?}; the logs:\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether process `pid` has a listening TCP socket on each of `ports`: the
/// sockets its file descriptors name, looked up in its network namespace's
/// socket tables.
fn listens_on(pid: u32, ports: &[u16]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let inodes: BTreeSet<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut listening = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            const LISTEN: &str = "0A";
            if *state != LISTEN || !inodes.contains(*inode) {
                continue;
            }
            if let Some(port) = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            {
                listening.insert(port);
            }
        }
    }
    ports.iter().all(|p| listening.contains(p))
}

#[cfg(test)]
mod tests {
    use super::super::process::{data_dir, find_binary};
    use super::*;

    /// Another process takes the port of the first attempt between the
    /// reservation and the server's start (here a listener of the test's,
    /// which answers a connect as the server would): the server exits, and
    /// starts again on new ports.
    #[tokio::test]
    async fn a_server_that_loses_its_port_starts_again_on_a_new_one() {
        let memcached = find_binary("memcached", &["/usr/bin"], "memcached");
        let memcached = memcached.to_string_lossy();
        let mut attempts = Vec::new();
        let (port, process) = start_on_loopback("memcached", 1, |ports| {
            let port = ports[0];
            let thief = attempts
                .is_empty()
                .then(|| TcpListener::bind(("127.0.0.1", port)).expect("take the port first"));
            attempts.push(port);
            let mut command = vec![memcached.to_string(), "-l".into(), "127.0.0.1".into()];
            command.extend(["-p".into(), port.to_string()]);
            if nix::unistd::geteuid().is_root() {
                command.extend(["-u".into(), "memcache".into()]);
            }
            let command: Vec<&str> = command.iter().map(String::as_str).collect();
            let process = Supervised::start(&data_dir("root"), "TERM", &command);
            async move {
                let connects = || async {
                    tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .is_ok()
                };
                let started = wait_started(
                    "memcached",
                    Duration::from_secs(30),
                    &[(&process, vec![port])],
                    connects,
                )
                .await;
                drop(thief);
                started.map(|()| (port, process))
            }
        })
        .await;
        assert_eq!(attempts.len(), 2, "attempts on ports {attempts:?}");
        assert_eq!(port, attempts[1]);
        assert!(!process.exited(), "the second server runs");
        assert!(listens_on(process.pid(), &[port]));
    }

    #[test]
    fn no_port_is_handed_out_twice() {
        let addrs: Vec<IpAddr> = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
            .iter()
            .map(|a| a.parse().expect("an address"))
            .collect();
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let reserved = reserve(&addrs);
            let ports = reserved.ports();
            for (port, addr) in ports.iter().zip(&addrs) {
                assert!(
                    TcpListener::bind((*addr, *port)).is_err(),
                    "port {port} is not held on {addr} while reserved"
                );
            }
            for port in reserved.release() {
                assert!(seen.insert(port), "port {port} handed out twice");
                assert!(port < range().1, "port {port} is in the ephemeral range");
            }
        }
    }
}
