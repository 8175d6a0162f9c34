//! etcd from the `etcd-server` package: one member, or a three-member
//! cluster on 127.0.0.1, 127.0.0.2 and 127.0.0.3, with data in temporary
//! directories; or the cluster `DISTLOCK_TEST_ETCD_URL` names. A TLS-only
//! member takes clients over TLS only, with client certificates of
//! [`TestCa::shared`] required (`--client-cert-auth`).

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::backends::ETCD;
use super::external::external;
use super::ports::{Listener, PortTaken, start_on_free_ports, wait_started};
use super::tls::TestCa;
use super::url::ServerUrl;
use super::{Supervised, data_dir, find_binary, log_of, started, wait_until_ready};

/// One etcd member.
#[derive(Debug)]
pub struct EtcdMember {
    /// `name` in the cluster.
    pub name: String,
    /// `host:port` clients connect to.
    pub client_addr: String,
    /// Whether clients must come over TLS, with a client certificate.
    pub tls: bool,
    process: Option<Supervised>,
}

impl EtcdMember {
    /// The process, to stop, kill or restart it.
    pub fn process(&self) -> &Supervised {
        started(&self.process, &self.client_addr)
    }

    /// Runs `etcdctl` against this member; `None` if it failed.
    pub fn ctl(&self, args: &[&str]) -> Option<String> {
        let out = etcdctl_to(&self.client_addr, self.tls, args)
            .output()
            .ok()?;
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

/// `etcdctl` aimed at `endpoints` (`host:port`, comma-separated), over TLS
/// with the test CA and the client certificate `root` if `tls`.
pub fn etcdctl_to(endpoints: &str, tls: bool, args: &[&str]) -> Command {
    if !tls {
        return etcdctl(endpoints, args);
    }
    let endpoints: Vec<String> = endpoints
        .split(',')
        .map(|e| format!("https://{e}"))
        .collect();
    let pki = TestCa::shared();
    let client = pki.client("root");
    let mut cmd = Command::new(find_binary("etcdctl", &[], "etcd-client"));
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .arg(format!("--cacert={}", pki.ca.display()))
        .arg(format!("--cert={}", client.cert.display()))
        .arg(format!("--key={}", client.key.display()))
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
        Self::start_on(&["127.0.0.1"], false).await
    }

    /// Starts a three-member cluster on 127.0.0.1, .2 and .3.
    pub async fn start_cluster() -> Self {
        Self::start_on(&["127.0.0.1", "127.0.0.2", "127.0.0.3"], false).await
    }

    /// Starts a one-member cluster that takes clients over TLS only, with
    /// the certificate of [`TestCa::shared`], and requires client
    /// certificates signed by that CA: [`url`](Self::url) carries the
    /// options that get through (the client certificate `distlock`).
    pub async fn start_tls() -> Self {
        Self::start_on(&["127.0.0.1"], true).await
    }

    async fn start_on(hosts: &[&str], tls: bool) -> Self {
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
            let pki = TestCa::shared();
            let client_scheme = if tls { "https" } else { "http" };
            // No plaintext client port: only the https listener.
            let tls_args = [
                "--client-cert-auth".to_owned(),
                format!("--trusted-ca-file={}", pki.ca.display()),
                format!("--cert-file={}", pki.server.cert.display()),
                format!("--key-file={}", pki.server.key.display()),
            ];
            let members = peers
                .into_iter()
                .map(|(name, client, peer)| {
                    let dir = data_dir("root");
                    let mut args = vec![
                        etcd.to_owned(),
                        format!("--name={name}"),
                        format!("--data-dir={}", dir.join("data").display()),
                        format!("--listen-client-urls={client_scheme}://{client}"),
                        format!("--advertise-client-urls={client_scheme}://{client}"),
                        format!("--listen-peer-urls=http://{peer}"),
                        format!("--initial-advertise-peer-urls=http://{peer}"),
                        format!("--initial-cluster={cluster}"),
                        format!("--initial-cluster-token={token}"),
                        "--initial-cluster-state=new".into(),
                        "--heartbeat-interval=100".into(),
                        "--election-timeout=1000".into(),
                    ];
                    if tls {
                        args.extend(tls_args.iter().cloned());
                    }
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    EtcdMember {
                        name,
                        client_addr: client,
                        tls,
                        process: Some(Supervised::start(&dir, "TERM", &args)),
                    }
                })
                .collect::<Vec<_>>();
            let addrs: Vec<String> = members.iter().map(|m| m.client_addr.clone()).collect();
            let url = ServerUrl::local(distlock::backends::etcd::SCHEMES[0], None, &addrs, "");
            let url = if tls {
                url.with_query(pki.url_options("distlock"))
            } else {
                url
            };
            let etcd = Self { members, url };
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
                                tls: false,
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

    /// One TLS-only member ([`start_tls`](Self::start_tls)) shared by every
    /// test in this test binary.
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<Etcd> = OnceCell::const_new();
        SHARED.get_or_init(Self::start_tls).await
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

    /// An `etcd://` URL for the cluster with a key prefix and a query string
    /// (after the TLS options, for a TLS-only cluster).
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
        let tls = self.members.iter().any(|m| m.tls);
        etcdctl_to(&self.endpoints(), tls, &["endpoint", "health", "--cluster"])
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
