//! distlock's elections against etcd's own, `etcdctl elect` (the Go
//! client's `concurrency.Election`), on one name: one leader between them
//! either way round, each reading the other's leader and value, and
//! `etcdctl elect -l` following distlock's leader and its proclaims.
//!
//! With the URL's prefix `P`, distlock's election `N` is etcdctl's
//! `P/N`. Every etcdctl is killed when its handle goes, on every path.

mod common {
    pub(crate) mod etcd;
}

use std::process::Stdio;
use std::time::Duration;

use common::etcd::wait_for_queue;
use conformance_tests::servers::etcd::{Etcd, etcdctl};
use conformance_tests::targets::fresh_table;
use distlock::backends::etcd::EtcdBackend;
use lock_core::{AcquireOptions, Election, Locker, Wait};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::{sleep, timeout};

const TTL: Duration = Duration::from_secs(4);
/// A generous bound on anything that takes a few round trips.
const PROMPT: Duration = Duration::from_secs(20);

/// An election of a fresh prefix: distlock's handle, and the name
/// etcdctl knows it by.
async fn election(etcd: &Etcd, name: &str) -> (Election, String) {
    let prefix = fresh_table();
    let backend = EtcdBackend::connect(&etcd.url(&prefix, ""))
        .await
        .expect("connect");
    let election = Locker::new(backend).election(name);
    (election, format!("{prefix}/{name}"))
}

fn opts(wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(TTL).wait(wait)
}

/// One `etcdctl` run, its output read line by line; killed when dropped.
struct Ctl {
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

impl Ctl {
    fn spawn(etcd: &Etcd, args: &[&str]) -> Self {
        let mut child = Command::from(etcdctl(&etcd.endpoints(), args))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("run etcdctl");
        let out = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        Self { child, out }
    }

    /// The next line it prints within `within`; `None` if it prints none.
    async fn line_within(&mut self, within: Duration) -> Option<String> {
        match timeout(within, self.out.next_line()).await {
            Ok(line) => line.expect("read etcdctl's output"),
            Err(_) => None,
        }
    }

    async fn line(&mut self, what: &str) -> String {
        self.line_within(PROMPT)
            .await
            .unwrap_or_else(|| panic!("etcdctl printed no {what} within {PROMPT:?}"))
    }

    /// etcdctl's key and value, as it prints them.
    async fn key_and_value(&mut self, what: &str) -> (String, String) {
        let key = self.line(what).await;
        (key, self.line(what).await)
    }

    /// Ctrl-C: etcdctl resigns and revokes its session's lease. Killed
    /// if it is not gone within [`PROMPT`].
    async fn interrupt(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGINT);
        }
        if timeout(PROMPT, self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }

    /// kill -9, as a crash: etcdctl's key stays until its lease goes.
    async fn crash(mut self) {
        self.child.kill().await.expect("kill etcdctl");
    }
}

/// A key's create revision and lease, as etcdctl reports them.
fn revision_and_lease(etcd: &Etcd, key: &str) -> (u64, i64) {
    let json = etcd.members[0]
        .ctl(&["get", key, "-w", "json"])
        .expect("etcdctl get -w json");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("etcdctl's JSON");
    let kv = &parsed["kvs"][0];
    match (kv["create_revision"].as_u64(), kv["lease"].as_i64()) {
        (Some(revision), Some(lease)) => (revision, lease),
        _ => panic!("no lease on {key}: {json}"),
    }
}

/// `etcdctl elect` leads first: a distlock campaign waits, and reads
/// etcdctl's proposal as the leader's value; once etcdctl is killed and
/// its lease is gone, distlock leads, with a greater term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distlock_waits_for_etcdctl_elect_and_follows_it() {
    let etcd = Etcd::shared().await;
    let (election, theirs) = election(etcd, "scheduler").await;
    let mut ctl = Ctl::spawn(etcd, &["elect", &theirs, "etcdctl-proposal"]);
    let (key, value) = ctl.key_and_value("leader key once it led").await;
    assert!(key.starts_with(&format!("{theirs}/")), "{key}");
    assert_eq!(value, "etcdctl-proposal");
    let (their_term, their_lease) = revision_and_lease(etcd, &key);

    let seen = election
        .leader()
        .await
        .expect("read")
        .expect("etcdctl's leader");
    assert_eq!(seen.value, "etcdctl-proposal");
    assert_eq!(seen.term.get(), their_term);
    assert_eq!(seen.owner, "", "etcdctl's key carries no owner token");
    let refused = election.try_campaign("distlock").await;
    assert!(refused.as_ref().is_err_and(|e| e.is_busy()), "{refused:?}");

    let campaign = {
        let election = election.clone();
        tokio::spawn(async move {
            election
                .campaign_with("distlock", opts(Wait::For(PROMPT * 3)))
                .await
        })
    };
    wait_for_queue(etcd, &format!("{theirs}/"), 2).await;
    assert!(!campaign.is_finished(), "distlock led while etcdctl did");

    // Its session's lease would live 60 s after the crash: revoke it, as
    // its expiry would.
    ctl.crash().await;
    etcd.members[0]
        .ctl(&["lease", "revoke", &format!("{their_lease:x}")])
        .expect("revoke etcdctl's lease");
    let ours = timeout(PROMPT, campaign)
        .await
        .expect("distlock leads once etcdctl's key is gone")
        .expect("campaign task")
        .expect("campaign");
    assert!(ours.term().get() > their_term, "{:?}", ours.term());
    let seen = election.leader().await.expect("read").expect("ours");
    assert_eq!((seen.value.as_str(), seen.term), ("distlock", ours.term()));
    assert_eq!(seen.owner, ours.lease().owner().short());
    ours.resign().await.expect("resign");
    assert!(election.leader().await.expect("read").is_none());
}

/// distlock leads first: `etcdctl elect` waits, and leads once distlock
/// resigns; distlock's observer sees the hand-over as it happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_waits_for_distlock() {
    let etcd = Etcd::shared().await;
    let (election, theirs) = election(etcd, "primary").await;
    let ours = election
        .campaign_with("distlock", opts(Wait::No))
        .await
        .expect("a vacant election");
    // Polling once an hour: what wakes it sooner is etcd's watch.
    let mut watch = election.observe().poll_every(Duration::from_secs(3600));
    let first = watch.changed().await.expect("observe").expect("ours");
    assert_eq!(
        (first.value.as_str(), first.term),
        ("distlock", ours.term())
    );

    let mut ctl = Ctl::spawn(etcd, &["elect", &theirs, "other"]);
    wait_for_queue(etcd, &format!("{theirs}/"), 2).await;
    let early = ctl.line_within(Duration::from_millis(1500)).await;
    assert_eq!(early, None, "etcdctl led while distlock did");
    let still = election.leader().await.expect("read").expect("ours");
    assert_eq!(still.term, ours.term());

    ours.resign().await.expect("resign");
    let (key, value) = ctl.key_and_value("leader key after the resign").await;
    assert!(key.starts_with(&format!("{theirs}/")), "{key}");
    assert_eq!(value, "other");
    let (their_term, _) = revision_and_lease(etcd, &key);
    let next = timeout(PROMPT, async {
        loop {
            match watch.changed().await.expect("observe") {
                Some(leader) if leader.value == "other" => return leader,
                _ => {}
            }
        }
    })
    .await
    .expect("the observer sees etcdctl lead");
    assert_eq!((next.term.get(), next.owner.as_str()), (their_term, ""));
    let refused = election.try_campaign("distlock").await;
    assert!(refused.as_ref().is_err_and(|e| e.is_busy()), "{refused:?}");

    // Ctrl-C: etcdctl resigns, and the election is vacant again.
    ctl.interrupt().await;
    let after = timeout(PROMPT, async {
        loop {
            if let Ok(g) = election.try_campaign("distlock-again").await {
                return g;
            }
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("distlock leads after etcdctl resigned");
    assert!(after.term().get() > their_term);
    after.resign().await.expect("resign");
}

/// `etcdctl elect -l` prints distlock's leader key and value, and the new
/// value after each proclaim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_listen_follows_distlock() {
    let etcd = Etcd::shared().await;
    let (election, theirs) = election(etcd, "checkpointer").await;
    let ours = election
        .campaign_with("10.0.0.7:8080", opts(Wait::No))
        .await
        .expect("a vacant election");
    let our_key = format!("{theirs}/{}", ours.lease().owner().to_hex());
    let (term, lease) = revision_and_lease(etcd, &our_key);
    assert_eq!(
        term,
        ours.term().get(),
        "the term is the key's create revision"
    );
    let mut ctl = Ctl::spawn(etcd, &["elect", "-l", &theirs]);
    let (key, value) = ctl.key_and_value("leader").await;
    assert_eq!(
        (key.as_str(), value.as_str()),
        (our_key.as_str(), "10.0.0.7:8080")
    );

    ours.proclaim("10.0.0.8:8080").await.expect("proclaim");
    let (key, value) = ctl.key_and_value("proclaimed value").await;
    assert_eq!(
        (key.as_str(), value.as_str()),
        (our_key.as_str(), "10.0.0.8:8080")
    );
    assert_eq!(
        revision_and_lease(etcd, &our_key),
        (term, lease),
        "a proclaim keeps the key's create revision and lease"
    );
    assert!(ours.is_leading().await.expect("ask"));
    ours.resign().await.expect("resign");
    ctl.interrupt().await;
}

/// On etcd the lock and the election of a name are one range, as
/// `etcdctl lock` and `etcdctl elect` share theirs: a lock's holder is
/// read as the leader, with an empty value, and each waits for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_an_election_of_one_name_are_one() {
    let etcd = Etcd::shared().await;
    let prefix = fresh_table();
    let backend = EtcdBackend::connect(&etcd.url(&prefix, ""))
        .await
        .expect("connect");
    let locker = Locker::new(backend);
    let election = locker.election("shared");
    let lock = locker
        .lock_with("shared", opts(Wait::No))
        .await
        .expect("free");
    let seen = election.leader().await.expect("read").expect("the holder");
    assert_eq!((seen.value.as_str(), seen.term), ("", lock.token()));
    assert_eq!(seen.owner, lock.lease().owner().short());
    let refused = election.try_campaign("candidate").await;
    assert!(refused.as_ref().is_err_and(|e| e.is_busy()), "{refused:?}");
    lock.release().await.expect("release");

    let leading = election.try_campaign("candidate").await.expect("vacant");
    let refused = locker.try_lock("shared").await;
    assert!(refused.as_ref().is_err_and(|e| e.is_busy()), "{refused:?}");
    leading.resign().await.expect("resign");
}
