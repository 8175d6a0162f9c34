//! The nemeses that act on the harness's servers and proxies, and the
//! choice of one for a README's fault.

use std::time::Duration;

use distlock_torture::{Nemesis, Run};
use lock_core::backend::async_trait;

use super::recovered;
use crate::proxy::{Fault, Proxy};
use crate::servers::Supervised;

/// kill -9 of a server, restarted on the same data (or, for a server that
/// keeps nothing, empty) when the fault ends.
pub struct ServerKill<'a> {
    /// The label the README's row uses.
    pub label: &'static str,
    /// The server.
    pub server: &'a Supervised,
}

#[async_trait]
impl Nemesis for ServerKill<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.kill();
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.restart();
        Ok(())
    }
}

/// SIGSTOP of a server for the fault's length, then SIGCONT.
pub struct ServerPause<'a> {
    /// The label the README's row uses.
    pub label: &'static str,
    /// The server.
    pub server: &'a Supervised,
}

#[async_trait]
impl Nemesis for ServerPause<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.pause();
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        self.server.resume();
        Ok(())
    }
}

/// A fault of the proxies between the workers and the server(s): `Stall`
/// is a partition for the fault's length, `DropNextReply` loses one reply.
pub struct NetworkFault<'a> {
    /// The label the README's row uses.
    pub label: &'static str,
    /// The proxies the workers' URL goes through.
    pub proxies: &'a [Proxy],
    /// What they do during the fault.
    pub fault: Fault,
}

#[async_trait]
impl Nemesis for NetworkFault<'_> {
    fn label(&self) -> String {
        self.label.to_owned()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        for proxy in self.proxies {
            proxy.set(self.fault);
        }
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        for proxy in self.proxies {
            proxy.set(Fault::None);
        }
        Ok(())
    }
}

/// Where a row's workers connect: to the server, or through the proxy a
/// network fault acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Straight to the server.
    Direct,
    /// Through the family's proxy.
    Proxied,
}

/// The nemesis of a fault every one-server family runs the same way —
/// `pause-holder`, `server-kill` (kill -9, restarted on its data at heal),
/// `server-pause`, `net-stall` and `net-drop-reply` — with the route its
/// workers take; `None` for any other label.
pub fn shared_nemesis<'a>(
    fault: &str,
    server: &'a Supervised,
    proxies: &'a [Proxy],
) -> Option<(Box<dyn Nemesis + 'a>, Route)> {
    let network = |label, fault| -> (Box<dyn Nemesis + 'a>, Route) {
        (
            Box::new(NetworkFault {
                label,
                proxies,
                fault,
            }),
            Route::Proxied,
        )
    };
    Some(match fault {
        "pause-holder" => (
            Box::<distlock_torture::PauseHolder>::default(),
            Route::Direct,
        ),
        "server-kill" => (
            Box::new(ServerKill {
                label: "server-kill",
                server,
            }),
            Route::Direct,
        ),
        "server-pause" => (
            Box::new(ServerPause {
                label: "server-pause",
                server,
            }),
            Route::Direct,
        ),
        "net-stall" => network("net-stall", Fault::Stall),
        "net-drop-reply" => network("net-drop-reply", Fault::DropNextReply),
        _ => return None,
    })
}

/// The nemesis of a row of a family whose server is slow to come back (a
/// consensus store restarted on its data, a member rejoining): as
/// [`shared_nemesis`], but `server-kill` and `leader-kill` (with `leader`,
/// the cluster's) strike again only once the lock was granted after the
/// last heal, waiting at most `patience`.
pub fn recovering_nemesis<'a>(
    fault: &str,
    server: &'a Supervised,
    proxies: &'a [Proxy],
    leader: Option<LeaderKill<'a>>,
    patience: Duration,
) -> Option<(Box<dyn Nemesis + 'a>, Route)> {
    use recovered::Recovered;
    Some(match (fault, leader) {
        ("server-kill", _) => (
            Box::new(Recovered {
                nemesis: ServerKill {
                    label: "server-kill",
                    server,
                },
                patience,
            }),
            Route::Direct,
        ),
        ("leader-kill", Some(nemesis)) => {
            (Box::new(Recovered { nemesis, patience }), Route::Direct)
        }
        (other, _) => return shared_nemesis(other, server, proxies),
    })
}

/// kill -9 of a cluster's leader, found anew at each fault (right after a
/// heal the cluster may still be electing: it waits up to 10 s for one);
/// the same member restarts on its data when the fault ends.
pub struct LeaderKill<'a> {
    leader: Box<dyn Fn() -> Option<&'a Supervised> + Send + Sync + 'a>,
    killed: Option<&'a Supervised>,
}

impl<'a> LeaderKill<'a> {
    /// `leader` names the current leader's process, if there is one.
    pub fn new(leader: impl Fn() -> Option<&'a Supervised> + Send + Sync + 'a) -> Self {
        Self {
            leader: Box::new(leader),
            killed: None,
        }
    }
}

#[async_trait]
impl Nemesis for LeaderKill<'_> {
    fn label(&self) -> String {
        "leader-kill".into()
    }
    async fn inject(&mut self, _: &Run) -> std::io::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let leader = loop {
            if let Some(leader) = (self.leader)() {
                break leader;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(std::io::Error::other("the cluster has no leader"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        leader.kill();
        self.killed = Some(leader);
        Ok(())
    }
    async fn heal(&mut self, _: &Run) -> std::io::Result<()> {
        if let Some(member) = self.killed.take() {
            member.restart();
        }
        Ok(())
    }
}
