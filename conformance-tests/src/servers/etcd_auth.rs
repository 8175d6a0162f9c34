//! An etcd member with authentication on, set up as a shared lock store
//! should be: the user `root` (role `root`) for the administrator, and per
//! team a user whose role may read and write one key prefix only — the
//! least that distlock needs (lock-etcd's README, "Least privilege").

use tokio::sync::OnceCell;

use super::etcd::{Etcd, etcdctl_to};
use super::tls::TestCa;

/// The teams: a user, and the key prefix its role may read and write.
pub const TEAMS: [(&str, &str); 2] = [("alice", "team-a/"), ("bob", "team-b/")];

/// A one-member cluster with authentication on and [`TEAMS`] set up.
#[derive(Debug)]
pub struct EtcdAuth {
    /// The member, reached by `etcdctl` only as root ([`ctl_as_root`](Self::ctl_as_root)).
    pub etcd: Etcd,
    root_password: String,
}

impl EtcdAuth {
    /// One such member shared by every test in this test binary.
    pub async fn shared() -> &'static Self {
        static SHARED: OnceCell<EtcdAuth> = OnceCell::const_new();
        SHARED.get_or_init(Self::start).await
    }

    /// One TLS-only member with auth on (`--client-cert-auth`), shared by
    /// every test in this test binary: a client certificate's common name
    /// is the user it acts as when it gives no password
    /// ([`url_by_certificate`](Self::url_by_certificate)).
    pub async fn shared_tls() -> &'static Self {
        static SHARED: OnceCell<EtcdAuth> = OnceCell::const_new();
        SHARED
            .get_or_init(|| async { Self::set_up(Etcd::start_tls().await) })
            .await
    }

    /// Starts a member, adds root and the teams, and turns auth on.
    pub async fn start() -> Self {
        Self::set_up(Etcd::start().await)
    }

    /// Adds root and the teams to `etcd`, and turns auth on.
    fn set_up(etcd: Etcd) -> Self {
        let made = Self {
            etcd,
            root_password: password("root"),
        };
        let root = format!("root:{}", made.root_password);
        made.setup(&["user", "add", &root, "--interactive=false"]);
        made.setup(&["user", "grant-role", "root", "root"]);
        for (user, prefix) in TEAMS {
            let role = role(user);
            let login = format!("{user}:{}", password(user));
            made.setup(&["role", "add", &role]);
            made.setup(&[
                "role",
                "grant-permission",
                &role,
                "--prefix=true",
                "readwrite",
                prefix,
            ]);
            made.setup(&["user", "add", &login, "--interactive=false"]);
            made.setup(&["user", "grant-role", user, &role]);
        }
        made.setup(&["auth", "enable"]);
        made
    }

    /// Runs a setting-up `etcdctl` command (before auth is on), or panics
    /// with its output.
    fn setup(&self, args: &[&str]) {
        let out = etcdctl_to(&self.etcd.endpoints(), self.tls(), args)
            .output()
            .expect("run etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `etcdctl` as root; its standard output, or `None` if it failed.
    pub fn ctl_as_root(&self, args: &[&str]) -> Option<String> {
        let user = format!("--user=root:{}", self.root_password);
        let mut all = vec![user.as_str()];
        all.extend_from_slice(args);
        let out = etcdctl_to(&self.etcd.endpoints(), self.tls(), &all)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// An `etcd://` URL that logs in as `user` (one of [`TEAMS`]), with the
    /// key prefix `path` and a query string.
    pub fn url_as(&self, user: &str, path: &str, query: &str) -> String {
        let login = format!("user={user}&password={}", password(user));
        let query = if query.is_empty() {
            login
        } else {
            format!("{login}&{query}")
        };
        self.etcd.url(path, &query)
    }

    /// An `etcd://` URL of the TLS-only member that presents the test CA's
    /// client certificate whose common name is `user`, and no password:
    /// etcd takes the name for the user.
    pub fn url_by_certificate(&self, user: &str, path: &str, query: &str) -> String {
        assert!(self.tls(), "only the TLS-only member knows certificates");
        let base = self.etcd.url(path, "");
        let (base, _) = base.split_once('?').unwrap_or((&base, ""));
        let mut url = format!("{base}?{}", TestCa::shared().url_options(user));
        if !query.is_empty() {
            url.push('&');
            url.push_str(query);
        }
        url
    }

    fn tls(&self) -> bool {
        self.etcd.members.iter().any(|m| m.tls)
    }

    /// The password of `user`, as the URLs give it.
    pub fn password_of(&self, user: &str) -> String {
        password(user)
    }
}

/// The role of `user`'s team.
fn role(user: &str) -> String {
    format!("locks-of-{user}")
}

/// A test password, the same all run long (no secret: the member lives on
/// loopback for the tests only).
fn password(user: &str) -> String {
    format!("{user}-pw-{}", std::process::id())
}
