//! distlock's elections on ZooKeeper against Apache Curator's own
//! `LeaderLatch` (Debian's `libcurator-recipes-java`, run with `java`; see
//! `conformance_tests::servers::curator`), both ways, on one path: a
//! Curator leader keeps distlock's candidate waiting and is seen by
//! distlock's `leader()`, and its close hands the lead to distlock; a
//! distlock leader keeps the latch from leading and is what the latch's
//! `getLeader()` shows, and its resign hands the lead to Curator.

#[allow(dead_code)]
mod common {
    pub(crate) mod zk;
}

use std::time::Duration;

use common::zk::{TTL, children, locker, opts, plain, wait_for_children};
use conformance_tests::servers::curator::Curator;
use conformance_tests::servers::zookeeper::ZooKeeper;
use conformance_tests::targets::fresh_table;
use lock_core::{Election, Leader, Wait};
use tokio::time::{sleep, timeout};
use zookeeper_client as zk;

/// A generous bound on anything that takes a JVM's start or a round trip.
const PATIENCE: Duration = Duration::from_secs(60);

/// A fresh chroot on the shared server, made by distlock's connect, and
/// Curator's connect string with the same chroot.
async fn chroot(zk: &ZooKeeper) -> (lock_core::Locker, zk::Client, String) {
    let chroot = fresh_table();
    let locker = locker(&zk.url(&chroot, "")).await;
    let client = plain(zk, &chroot).await;
    (locker, client, format!("{}/{chroot}", zk.connect_string()))
}

/// The `index`-th node under `parent` by sequence: its name, data and
/// czxid.
async fn node(client: &zk::Client, parent: &str, index: usize) -> (String, Vec<u8>, u64) {
    let nodes = children(client, parent).await;
    let mut by_sequence = nodes.clone();
    by_sequence.sort_by_key(|n| n.rsplit_once("latch-").map(|(_, s)| s.to_owned()));
    let name = by_sequence
        .get(index)
        .unwrap_or_else(|| panic!("no node {index} in {parent}: {nodes:?}"))
        .clone();
    let (data, stat) = client
        .get_data(&format!("{parent}/{name}"))
        .await
        .expect("read a latch node");
    (name, data, u64::try_from(stat.czxid).expect("czxid"))
}

/// Reads distlock's leader until it proclaims `value`.
async fn leader_is(election: &Election, value: &str) -> Leader {
    timeout(PATIENCE, async {
        loop {
            let now = election.leader().await.expect("read the leader");
            if let Some(l) = now.filter(|l| l.value == value) {
                return l;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("distlock never saw {value:?} lead"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_leader_keeps_distlock_waiting_until_it_closes() {
    let zk = ZooKeeper::shared().await;
    let (locker, client, connect) = chroot(zk).await;
    let curator = Curator::compile();
    let parent = "/elections/jobs";
    let mut latch = curator.latch(&connect, parent, "curator-a").await;
    latch.expect("leader", PATIENCE).await;

    // distlock reads Curator's leader: its participant id, its node's
    // czxid as the term, and no distlock owner.
    let election = locker.election("jobs");
    let seen = leader_is(&election, "curator-a").await;
    let (curator_node, data, czxid) = node(&client, parent, 0).await;
    assert!(curator_node.starts_with("_c_"), "{curator_node}");
    assert_eq!(data, b"curator-a");
    assert_eq!(
        seen.term.get(),
        czxid,
        "the term is the leader node's czxid"
    );
    assert_eq!(seen.owner, "", "a Curator latch has no distlock owner");
    let mut watch = election.observe();
    let first = watch.changed().await.expect("observe");
    assert_eq!(first.map(|l| l.value), Some("curator-a".to_owned()));

    // distlock does not lead while Curator does: refused, or queued.
    let refused = election.try_campaign("distlock-a").await;
    assert!(
        refused.as_ref().is_err_and(lock_core::Error::is_busy),
        "distlock led beside Curator: {refused:?}"
    );
    let campaign = {
        let election = election.clone();
        tokio::spawn(async move {
            election
                .campaign_with("distlock-a", opts(TTL, Wait::For(PATIENCE)))
                .await
        })
    };
    wait_for_children(&client, parent, 2).await;
    sleep(Duration::from_millis(500)).await;
    assert!(!campaign.is_finished(), "distlock led beside Curator");
    let (_, has) = latch.ask().await;
    assert!(has, "Curator lost the lead to a queued distlock candidate");

    // Curator's close hands the lead to distlock, which observers see.
    latch.close().await;
    let guard = timeout(PATIENCE, campaign)
        .await
        .expect("distlock leads once Curator's latch closes")
        .expect("campaign task")
        .expect("campaign");
    assert!(
        guard.term() > seen.term,
        "{:?} after {:?}",
        guard.term(),
        seen.term
    );
    let next = timeout(PATIENCE, watch.changed())
        .await
        .expect("the observer is woken")
        .expect("observe")
        .expect("distlock leads");
    assert_eq!(next.value, "distlock-a");
    assert_eq!(next.term, guard.term());
    assert_eq!(next.owner, guard.lease().owner().short());
    guard.resign().await.expect("resign");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distlock_leader_keeps_curator_waiting_until_it_resigns() {
    let zk = ZooKeeper::shared().await;
    let (locker, client, connect) = chroot(zk).await;
    let curator = Curator::compile();
    let parent = "/elections/reports";
    let election = locker.election("reports");
    let guard = election
        .campaign_with("distlock-b", opts(TTL, Wait::No))
        .await
        .expect("a vacant election is won at once");

    // distlock's node is a latch node: Curator's name, the value as data.
    let (ours, data, czxid) = node(&client, parent, 0).await;
    let (uuid, sequence) = ours
        .strip_prefix("_c_")
        .and_then(|rest| rest.rsplit_once("-latch-"))
        .unwrap_or_else(|| panic!("not a latch node: {ours}"));
    assert_eq!(uuid.len(), 36, "a uuid: {ours}");
    assert!(sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(data, b"distlock-b");
    assert_eq!(guard.term().get(), czxid);

    // A proclaim with nobody behind; the latch then queues behind the
    // leader and sees its value.
    guard.proclaim("distlock-b2").await.expect("proclaim");
    let mut latch = curator.latch(&connect, parent, "curator-b").await;
    wait_for_children(&client, parent, 2).await;
    assert!(
        !latch.leader_becomes("distlock-b2", PATIENCE).await,
        "Curator leads beside distlock"
    );
    let seen = leader_is(&election, "distlock-b2").await;
    assert_eq!(seen.owner, guard.lease().owner().short());
    assert_eq!(seen.term, guard.term(), "a proclaim keeps the term");

    // With the latch next in line, a proclaim is refused and changes
    // nothing: the data change would end the latch's watch on the leader's
    // node (LeaderLatch looks again only when that node is deleted).
    let refused = guard.proclaim("distlock-b3").await;
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("LeaderLatch")),
        "{refused:?}"
    );
    assert_eq!(latch.ask().await, ("distlock-b2".to_owned(), false));
    assert!(!latch.printed("leader"), "Curator led beside distlock");
    assert!(
        guard.is_leading().await.expect("ask"),
        "a refused proclaim keeps the lead"
    );

    // distlock's resign hands the lead to Curator, which distlock reads.
    let term = guard.term();
    guard.resign().await.expect("resign");
    latch.expect("leader", PATIENCE).await;
    assert_eq!(latch.ask().await, ("curator-b".to_owned(), true));
    let curators = leader_is(&election, "curator-b").await;
    assert!(curators.term > term, "{curators:?} after {term:?}");
    assert_eq!(curators.owner, "");
    latch.close().await;
    timeout(PATIENCE, async {
        while election.leader().await.expect("read").is_some() {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("nobody leads once the latch closes");
}
