//! etcd from the `etcd-server` package: one member, or a three-member
//! cluster on 127.0.0.1, 127.0.0.2 and 127.0.0.3, with data in temporary
//! directories; or the cluster `DISTLOCK_TEST_ETCD_URL` names.

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::external::{ETCD, external};
use super::ports::{Listener, PortTaken, start_on_free_ports, wait_started};
use super::url::ServerUrl;
use super::{Supervised, data_dir, find_binary, log_of, started, wait_until_ready};

/// One etcd member.
#[derive(Debug)]
pub struct EtcdMember {
    /// `name` in the cluster.
    pub name: String,
    /// `host:port` clients connect to.
    pub client_addr: String,
    process: Option<Supervised>,
}

impl EtcdMember {
    /// The process, to stop, kill or restart it.
    pub fn process(&self) -> &Supervised {
        started(&self.process, &self.client_addr)
    }

    /// Runs `etcdctl` against this member; `None` if it failed.
    pub fn ctl(&self, args: &[&str]) -> Option<String> {
        let out = etcdctl(&self.client_addr, args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// `etcdctl` aimed at `endpoints`, speaking the v3 API.
pub fn etcdctl(endpoints: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(find_binary("etcdctl", &[], "etcd-client"));
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(args);
    cmd
}

/// A running etcd cluster of one or three members.
#[derive(Debug)]
pub struct Etcd {
    /// The members.
    pub members: Vec<EtcdMember>,
    url: ServerUrl,
}

impl Etcd {
    /// Starts a one-member cluster.
    pub async fn start() -> Self {
        Self::start_on(&["127.0.0.1"]).await
    }

    /// Starts a three-member cluster on 127.0.0.1, .2 and .3.
    pub async fn start_cluster() -> Self {
        Self::start_on(&["127.0.0.1", "127.0.0.2", "127.0.0.3"]).await
    }

    async fn start_on(hosts: &[&str]) -> Self {
        let etcd = find_binary("etcd", &[], "etcd-server")
            .to_string_lossy()
            .into_owned();
        let etcd = etcd.as_str();
        // A client port and a peer port on each member's address.
        let addrs: Vec<IpAddr> = hosts
            .iter()
            .flat_map(|h| [h.parse().expect("a loopback address"); 2])
            .collect();
        start_on_free_ports("etcd", &addrs, |ports| async move {
            let peers: Vec<(String, String, String)> = hosts
                .iter()
                .zip(ports.chunks(2))
                .enumerate()
                .map(|(i, (h, ports))| {
                    (
                        format!("m{i}"),
                        format!("{h}:{}", ports[0]),
                        format!("{h}:{}", ports[1]),
                    )
                })
                .collect();
            let cluster: Vec<String> = peers
                .iter()
                .map(|(n, _, peer)| format!("{n}=http://{peer}"))
                .collect();
            let cluster = cluster.join(",");
            // Unique to this cluster: no port is handed out twice.
            let token = format!("distlock-{}", ports[0]);
            let members = peers
                .into_iter()
                .map(|(name, client, peer)| {
                    let dir = data_dir("root");
                    let args = [
                        etcd.to_owned(),
                        format!("--name={name}"),
                        format!("--data-dir={}", dir.join("data").display()),
                        format!("--listen-client-urls=http://{client}"),
                        format!("--advertise-client-urls=http://{client}"),
                        format!("--listen-peer-urls=http://{peer}"),
                        format!("--initial-advertise-peer-urls=http://{peer}"),
                        format!("--initial-cluster={cluster}"),
                        format!("--initial-cluster-token={token}"),
                        "--initial-cluster-state=new".into(),
                        "--heartbeat-interval=100".into(),
                        "--election-timeout=1000".into(),
                    ];
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    EtcdMember {
                        name,
                        client_addr: client,
                        process: Some(Supervised::start(&dir, "TERM", &args)),
                    }
                })
                .collect::<Vec<_>>();
            let addrs: Vec<String> = members.iter().map(|m| m.client_addr.clone()).collect();
            let etcd = Self {
                members,
                url: ServerUrl::local(distlock::lock_etcd::SCHEMES[0], None, &addrs, ""),
            };
            etcd.wait_started(&ports).await?;
            Ok(etcd)
        })
        .await
    }

    /// A one-member cluster shared by every test in this test binary: the
    /// cluster `DISTLOCK_TEST_ETCD_URL` names, if set.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<Etcd> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                match external(&ETCD, "").await {
                    Some(url) => Self {
                        members: url
                            .addresses()
                            .into_iter()
                            .enumerate()
                            .map(|(i, client_addr)| EtcdMember {
                                name: format!("external{i}"),
                                client_addr,
                                process: None,
                            })
                            .collect(),
                        url,
                    },
                    None => Self::start().await,
                }
            })
            .await
    }

    /// Every member's client address, comma-separated.
    pub fn endpoints(&self) -> String {
        let addrs: Vec<&str> = self
            .members
            .iter()
            .map(|m| m.client_addr.as_str())
            .collect();
        addrs.join(",")
    }

    /// An `etcd://` URL for the cluster with a key prefix and a query string.
    pub fn url(&self, prefix: &str, query: &str) -> String {
        self.url.url_at(prefix, query)
    }

    /// Waits until the cluster has a leader and answers.
    pub async fn wait_ready(&self) {
        wait_until_ready(
            "etcd",
            Duration::from_secs(60),
            || self.logs(),
            || async { self.healthy() },
        )
        .await;
    }

    /// Waits until a cluster just started on `ports` (a client and a peer
    /// port per member) is ready; [`PortTaken`] if a member could not
    /// listen.
    async fn wait_started(&self, ports: &[u16]) -> Result<(), PortTaken> {
        let listeners: Vec<Listener<'_>> = self
            .members
            .iter()
            .zip(ports.chunks(2))
            .map(|(m, ports)| (m.process(), ports.to_vec()))
            .collect();
        wait_started("etcd", Duration::from_secs(60), &listeners, || async {
            self.healthy()
        })
        .await
    }

    fn healthy(&self) -> bool {
        etcdctl(&self.endpoints(), &["endpoint", "health", "--cluster"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| log_of(&m.process))
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// The member that leads now, if one does.
    pub fn leader(&self) -> Option<&EtcdMember> {
        self.members.iter().find(|m| {
            m.ctl(&["endpoint", "status", "-w", "fields"])
                .is_some_and(|s| {
                    s.lines()
                        .any(|l| l.starts_with("\"Leader\"") && l.contains(&member_id(&s)))
                })
        })
    }
}

/// The `MemberID` field of `etcdctl endpoint status -w fields` output.
fn member_id(status: &str) -> String {
    status
        .lines()
        .find(|l| l.starts_with("\"MemberID\""))
        .and_then(|l| l.split(':').nth(1))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}
