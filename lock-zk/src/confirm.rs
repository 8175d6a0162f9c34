//! The check that vouches for our session: a transaction that checks our
//! node, which the leader commits, with a read of the node and a listing
//! of its parent sent behind it in the same round trip.

use std::future::Future;
use std::pin::Pin;

use lock_core::Result;
use lock_core::backend::WaitBudget;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::convert;
use crate::layout::Queue;
use crate::node::{ANY_VERSION, Node, Vouched};
use crate::session::Core;

/// A listing sent behind a check, with a watch on the children if asked.
type Listing<'a> = Pin<
    Box<
        dyn Future<
                Output = std::result::Result<(Vec<String>, Option<zk::OneshotWatcher>), zk::Error>,
            > + Send
            + 'a,
    >,
>;

impl Core {
    /// Whether our node at `path` (created by this session, with `czxid`)
    /// is still there as the leader sees it. A read alone may come from a
    /// follower cut off from the leader, which answers from its old state
    /// until it notices, and `sync` is answered by a leader that may already
    /// have been replaced. So this is a transaction that only checks that
    /// the node exists, which the leader commits with a quorum and the
    /// server applies before it answers, then a read of the node on the same
    /// session, which the server answers after that transaction: both sent
    /// at once, one round trip.
    pub(crate) async fn confirm(
        &self,
        client: &zk::Client,
        path: &str,
        czxid: i64,
    ) -> Result<std::result::Result<bool, zk::Error>> {
        let confirmed = self.confirm_and_list(client, path, czxid, None).await?;
        Ok(confirmed.map(|(mine, _)| mine))
    }

    /// [`Self::confirm`], and in the same round trip, sent last, a listing
    /// of `parent` if given (with a watch on its children if asked):
    /// answered after the check was applied, it is vouched for by it.
    pub(crate) async fn confirm_and_list(
        &self,
        client: &zk::Client,
        path: &str,
        czxid: i64,
        parent: Option<(&str, bool)>,
    ) -> Result<
        std::result::Result<(bool, Option<(Vec<String>, Option<zk::OneshotWatcher>)>), zk::Error>,
    > {
        let mut check = client.new_multi_writer();
        if let Err(e) = check.add_check_version(path, ANY_VERSION) {
            return Ok(Err(e));
        }
        let committed = check.commit();
        let read = client.check_stat(path);
        let list: Option<Listing<'_>> = parent.map(|(p, watch)| -> Listing<'_> {
            if watch {
                let list = client.list_and_watch_children(p);
                Box::pin(async move { list.await.map(|(c, w)| (c, Some(w))) })
            } else {
                let list = client.list_children(p);
                Box::pin(async move { list.await.map(|c| (c, None)) })
            }
        });
        let session = client.session_id().0;
        self.call("confirm our node", async {
            let list = async {
                match list {
                    Some(list) => list.await.map(Some),
                    None => Ok(None),
                }
            };
            let (committed, read, listed) = tokio::join!(committed, read, list);
            match committed {
                Ok(_) => {}
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::NoNode,
                    ..
                }) => return Ok((false, None)),
                Err(e) => return Err(e.into()),
            }
            let mine = read?.is_some_and(|s| s.czxid == czxid && s.ephemeral_owner == session);
            Ok((mine, listed?))
        })
        .await
    }

    /// A listing of `queue` that vouches for our session: the one sent with
    /// our create if it is still unused, else a new one behind a check of
    /// our node (with a watch on the children if `watch`). `None` when our
    /// node is gone.
    pub(crate) async fn vouched_listing(
        &self,
        client: &zk::Client,
        queue: &Queue,
        node: &mut Node,
        watch: bool,
        budget: &WaitBudget,
    ) -> Result<Option<(Vouched, Option<zk::OneshotWatcher>)>> {
        if let Some(vouched) = node.vouched.take() {
            return Ok(Some((vouched, None)));
        }
        budget.attempted();
        let path = format!("{}/{}", queue.parent, node.name);
        let sent = Instant::now();
        match self
            .confirm_and_list(client, &path, node.czxid, Some((&queue.parent, watch)))
            .await?
        {
            Ok((true, listed)) => {
                let (children, watcher) = listed.unwrap_or_default();
                Ok(Some((Vouched { sent, children }, watcher)))
            }
            Ok((false, _)) => Ok(None),
            Err(e) => Err(convert("confirm our place", e)),
        }
    }
}
