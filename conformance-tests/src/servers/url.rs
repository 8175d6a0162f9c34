//! Where a test server is and how to log in: the one shape behind the URLs
//! of the servers the harness starts and of those named by a
//! `DISTLOCK_TEST_*_URL` variable (see [`super::external`]). Tests add
//! their own path (a key prefix, a chroot) and query options to it.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

use super::backends::{Backend, Userinfo};

/// `scheme://[userinfo@]host:port[,…][/path][?query]`. `Debug` and
/// [`ServerUrl::redacted`] never show a password.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl {
    scheme: String,
    hosts: Vec<Host>,
    path: String,
    query: String,
}

/// One entry of the host list.
#[derive(Clone, PartialEq, Eq)]
struct Host {
    /// `user[:password]` as written (percent-encoded), if any.
    userinfo: Option<String>,
    /// A name, an IPv4 address, or an IPv6 address in brackets.
    host: String,
    port: u16,
}

impl Host {
    fn authority(&self, password: bool) -> String {
        let address = format!("{}:{}", self.host, self.port);
        match &self.userinfo {
            None => address,
            Some(info) => match info.split_once(':') {
                Some((user, _)) if !password => format!("{user}:***@{address}"),
                _ => format!("{info}@{address}"),
            },
        }
    }

    fn password(&self) -> Option<&str> {
        self.userinfo
            .as_deref()
            .and_then(|i| i.split_once(':'))
            .map(|(_, p)| p)
    }
}

impl ServerUrl {
    /// A server the harness started: one or more `host:port` entries that
    /// share `userinfo`, and the path every URL keeps (a database name).
    pub fn local(scheme: &str, userinfo: Option<&str>, hosts: &[String], path: &str) -> Self {
        let hosts = hosts
            .iter()
            .map(|h| {
                let (host, port) = h.rsplit_once(':').expect("host:port");
                Host {
                    userinfo: userinfo.map(str::to_owned),
                    host: host.to_owned(),
                    port: port.parse().expect("a port number"),
                }
            })
            .collect();
        Self {
            scheme: scheme.to_owned(),
            hosts,
            path: path.to_owned(),
            query: String::new(),
        }
    }

    /// The same server with options every URL of it carries before the
    /// test's own (a TLS-only server's CA and client certificate).
    pub fn with_query(self, query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            ..self
        }
    }

    /// Checks `text` against what the tests of `backend` need (see
    /// [`Backend`]). The error never contains the password.
    pub fn parse(backend: &Backend, text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (scheme, rest) = text
            .split_once("://")
            .ok_or("it has no scheme; it must start with SCHEME://")?;
        if !backend.schemes.contains(&scheme) {
            return Err(format!(
                "the scheme is \"{scheme}\"; it must be one of {}",
                backend.schemes.join(", ")
            ));
        }
        if rest.contains('#') {
            return Err("it has a fragment (#); percent-encode a # in a password as %23".into());
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let hosts = hosts
            .split(',')
            .map(|h| parse_host(backend, h))
            .collect::<Result<Vec<_>, _>>()?;
        if hosts.len() > 1 && !backend.many_hosts {
            return Err("it names several hosts; the tests use one server".into());
        }
        if !path.is_empty() && !backend.path {
            return Err(format!(
                "it has a path (/{path}); give none: each test makes its own under the root"
            ));
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            if backend.reserved.contains(&key) {
                return Err(format!(
                    "it sets \"{key}\"; leave it out: each test picks its own"
                ));
            }
        }
        let url = Self {
            scheme: scheme.to_owned(),
            hosts,
            path: path.to_owned(),
            query: query.to_owned(),
        };
        if backend.userinfo == Userinfo::PasswordRequired {
            let password = url
                .password()
                .ok_or("it has no password; the tests check that a wrong one is refused and that none is ever shown, so give the server one")?;
            // Those tests look for the password in error messages and
            // `Debug` output, which show the rest of the URL.
            if url.redacted().contains(password) {
                return Err(
                    "its password also appears elsewhere in it (user, host or path); \
                     the tests look for it in messages, so pick another"
                        .into(),
                );
            }
        }
        Ok(url)
    }

    /// The URL with this query string (no leading `?`) after the server's
    /// own options.
    pub fn url(&self, query: &str) -> String {
        self.build(&self.hosts, &self.path, query)
    }

    /// The URL with `path` (no leading `/`) instead of the server's own: a
    /// key prefix or a chroot.
    pub fn url_at(&self, path: &str, query: &str) -> String {
        self.build(&self.hosts, path, query)
    }

    /// The URL through `127.0.0.1:port` (a proxy's, or a closed port), with
    /// the first host's credentials.
    pub fn url_via(&self, port: u16, query: &str) -> String {
        self.via(port).url(query)
    }

    /// The same server, logged in to as `user` with `password`.
    pub fn as_user(&self, user: &str, password: &str) -> Self {
        let hosts = self
            .hosts
            .iter()
            .map(|h| Host {
                userinfo: Some(format!("{user}:{password}")),
                ..h.clone()
            })
            .collect();
        Self {
            hosts,
            ..self.clone()
        }
    }

    /// The first host, reached through `127.0.0.1:port` instead.
    pub fn via(&self, port: u16) -> Self {
        let host = Host {
            host: "127.0.0.1".into(),
            port,
            ..self.hosts[0].clone()
        };
        Self {
            hosts: vec![host],
            ..self.clone()
        }
    }

    fn build(&self, hosts: &[Host], path: &str, query: &str) -> String {
        let authority: Vec<String> = hosts.iter().map(|h| h.authority(true)).collect();
        let mut url = format!("{}://{}", self.scheme, authority.join(","));
        if !path.is_empty() {
            url.push('/');
            url.push_str(path);
        }
        let query: Vec<&str> = [self.query.as_str(), query]
            .into_iter()
            .filter(|q| !q.is_empty())
            .collect();
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.join("&"));
        }
        url
    }

    /// The URL with every password shown as `***`.
    pub fn redacted(&self) -> String {
        let authority: Vec<String> = self.hosts.iter().map(|h| h.authority(false)).collect();
        let mut url = format!("{}://{}", self.scheme, authority.join(","));
        if !self.path.is_empty() {
            url.push('/');
            url.push_str(&self.path);
        }
        if !self.query.is_empty() {
            // Secret options too (etcd's `password=`). Only the query goes
            // through `redact`, which reads one user-info per URL.
            url.push_str(&lock_core::url::redact(&format!("?{}", self.query)));
        }
        url
    }

    /// Each host as `host:port`, without credentials.
    pub fn addresses(&self) -> Vec<String> {
        self.hosts
            .iter()
            .map(|h| format!("{}:{}", h.host, h.port))
            .collect()
    }

    /// This server as a one-host URL of another scheme (a Redlock master as
    /// `redis://`), keeping its credentials and path but none of the
    /// options.
    pub fn host(&self, index: usize, scheme: &str) -> Self {
        Self {
            scheme: scheme.to_owned(),
            hosts: vec![self.hosts[index].clone()],
            path: self.path.clone(),
            query: String::new(),
        }
    }

    /// The first host's `[userinfo@]host:port`, password included.
    pub fn authority(&self) -> String {
        self.hosts[0].authority(true)
    }

    /// The first host's address, resolved (for a proxy in front of it).
    pub fn socket_addr(&self) -> SocketAddr {
        resolve(&self.addresses()[0])
    }

    /// The first host's name or address, without its port.
    pub fn hostname(&self) -> &str {
        &self.hosts[0].host
    }

    /// The first host's port.
    pub fn port(&self) -> u16 {
        self.hosts[0].port
    }

    /// The first host's user name, if the URL has one.
    pub fn user(&self) -> Option<&str> {
        let info = self.hosts[0].userinfo.as_deref()?;
        Some(info.split_once(':').map_or(info, |(u, _)| u)).filter(|u| !u.is_empty())
    }

    /// The first host's password as written in the URL, if it has one.
    pub fn password(&self) -> Option<&str> {
        self.hosts[0].password()
    }

    /// The path every URL keeps (a database), without its `/`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The scheme.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }
}

impl fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// The first address `host:port` resolves to.
pub(super) fn resolve(address: &str) -> SocketAddr {
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| panic!("cannot resolve {address}"))
}

fn parse_host(backend: &Backend, entry: &str) -> Result<Host, String> {
    let (userinfo, address) = match entry.rsplit_once('@') {
        Some((info, address)) => (Some(info), address),
        None => (None, entry),
    };
    if userinfo.is_some() && backend.userinfo == Userinfo::Refused {
        return Err(format!(
            "it has a user name or password before a host; {}",
            backend.credentials_hint
        ));
    }
    let (host, port) = match address.rsplit_once(':') {
        // An IPv6 address without a port: the last colon is inside it.
        Some((host, port)) if !port.ends_with(']') => (host, Some(port)),
        _ => (address, None),
    };
    if host.is_empty() {
        return Err("a host is empty".into());
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(format!(
            "host \"{host}\" is not NAME, IPv4 or [IPv6] (an IPv6 address goes in brackets)"
        ));
    }
    let port = match port {
        None => backend.default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("port \"{p}\" of host {host} is not a port number"))?,
    };
    Ok(Host {
        userinfo: userinfo.map(str::to_owned),
        host: host.to_owned(),
        port,
    })
}

/// Two query strings (no leading `?`) as one.
pub fn join_query(first: &str, second: &str) -> String {
    match (first.is_empty(), second.is_empty()) {
        (true, _) => second.to_owned(),
        (_, true) => first.to_owned(),
        _ => format!("{first}&{second}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servers::backends::{ETCD, MYSQL, POSTGRES, REDIS, REDLOCK};

    #[test]
    fn urls_keep_the_server_and_add_the_tests_options() {
        let url = ServerUrl::parse(
            &POSTGRES,
            "postgres://app:pg-secret@db.local:6543/locks?sslmode=disable",
        )
        .expect("valid");
        assert_eq!(
            url.url("table=t1"),
            "postgres://app:pg-secret@db.local:6543/locks?sslmode=disable&table=t1"
        );
        assert_eq!(
            url.url_via(4000, ""),
            "postgres://app:pg-secret@127.0.0.1:4000/locks?sslmode=disable"
        );
        assert_eq!(url.password(), Some("pg-secret"));
        assert_eq!(url.user(), Some("app"));
        assert_eq!(url.port(), 6543);
        assert_eq!(
            url.redacted(),
            "postgres://app:***@db.local:6543/locks?sslmode=disable"
        );
        assert!(!format!("{url:?}").contains("pg-secret"));

        let etcd = ServerUrl::parse(&ETCD, "etcd://10.0.0.1,10.0.0.2:2400").expect("valid");
        assert_eq!(
            etcd.url_at("locks_1", "timeout=1s"),
            "etcd://10.0.0.1:2379,10.0.0.2:2400/locks_1?timeout=1s"
        );
        let redlock =
            ServerUrl::parse(&REDLOCK, "redlock://a:pw1@h1:1,h2:2,b:pw2@h3:3/2").expect("valid");
        assert_eq!(redlock.host(2, "redis").url(""), "redis://b:pw2@h3:3/2");
        assert_eq!(redlock.redacted(), "redlock://a:***@h1:1,h2:2,b:***@h3:3/2");
        let v6 = ServerUrl::parse(&ETCD, "etcd://[::1]:2379,[::2]").expect("valid");
        assert_eq!(v6.addresses(), ["[::1]:2379", "[::2]:2379"]);
    }

    #[test]
    fn unusable_urls_are_refused_with_the_reason_and_without_the_password() {
        for (backend, text, why) in [
            (&REDIS, "127.0.0.1:6379", "no scheme"),
            (
                &REDIS,
                "redlock://h:1,h:2,h:3",
                "must be one of redis, rediss",
            ),
            (&REDIS, "redis://127.0.0.1:6379", "no password"),
            (&REDIS, "redis://distlock:distlock@h:1", "appears elsewhere"),
            (&REDIS, "redis://u:hunter2@h:1,h:2", "several hosts"),
            (&REDIS, "redis://u:hunter2@h:port", "not a port number"),
            (&REDIS, "redis://u:hunter2@h:1?prefix=x:", "sets \"prefix\""),
            (&REDIS, "redis://u:hunter2@:1", "a host is empty"),
            (&MYSQL, "mysql://u:hunter2@h:1/db?table=t", "sets \"table\""),
            (&ETCD, "etcd://h:1/ci", "has a path"),
            (&ETCD, "etcd://root:hunter2@h:1", "?user="),
            (&ETCD, "etcd://h:1,", "a host is empty"),
            (&ETCD, "etcd://::1", "IPv6"),
        ] {
            let err = ServerUrl::parse(backend, text).expect_err(text);
            assert!(err.contains(why), "{text}: {err}");
            assert!(!err.contains("hunter2"), "{text}: {err}");
        }
    }
}
