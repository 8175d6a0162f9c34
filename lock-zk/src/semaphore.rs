//! Semaphores in the layout and by the rules of Curator's
//! `InterProcessSemaphoreV2`: under `/semaphores/<name>`, a mutex (`locks`)
//! that one acquirer at a time holds while it counts the leases, and the
//! lease nodes (`leases`). The acquirer at the head of the mutex adds its
//! lease node and is granted when the leases number no more than the
//! permits; otherwise it waits, still holding the mutex, for the leases to
//! change. Only that one acquirer watches the leases, so a release wakes it
//! alone, and its grant (the mutex let go) wakes the next in line.

use std::sync::Arc;

use lock_core::backend::{AcquireRequest, Backoff, Lease, Retry, WaitBudget};
use lock_core::{Error, Result};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::cleanup::RETRY_CAP;
use crate::layout::{Queue, owner_prefix};
use crate::node::{Node, Vouched};
use crate::recipe::session_ended_while_waiting;
use crate::session::{Core, connected};
use crate::waiters::{LeaseToMake, Waiter};

impl Core {
    /// One of `permits` permits of the semaphore `req.name`.
    pub(crate) async fn acquire_permit(
        self: &Arc<Self>,
        req: &AcquireRequest,
        permits: u32,
        budget: &WaitBudget,
    ) -> Result<Lease> {
        let mutex = Queue::semaphore_mutex(&req.name);
        let leases = Queue::semaphore_leases(&req.name);
        let mut retry = Retry::new(crate::NAME, budget, Backoff::with_cap(RETRY_CAP));
        // Our nodes in the mutex and among the leases, with their session,
        // once created: an attempt after a lost connection finds them again.
        let mut turn: Option<(i64, Node)> = None;
        let mut lease: Option<(i64, Node)> = None;
        let to_make = LeaseToMake {
            parent: leases.parent.clone(),
            prefix: leases.node_prefix(req.owner),
            data: req.value.as_bytes().to_vec(),
        };
        let outcome = loop {
            let attempt = async {
                let client = self.session_for(req, budget).await?;
                let look_first = retry.attempts() > 0;
                let (_, taken) = self
                    .take_turn(
                        &client,
                        &mutex,
                        req,
                        &mut turn,
                        look_first,
                        Some(&to_make),
                        budget,
                    )
                    .await?;
                if let Some(made) = taken.lease {
                    lease = Some((client.session_id().0, made));
                    self.set_uncertain(req.owner, false);
                }
                let (node, sent) = self
                    .count_in(
                        &client, &leases, req, permits, &mut lease, look_first, budget,
                    )
                    .await?;
                Ok::<_, Error>((client, node, sent))
            };
            match attempt.await {
                Ok(granted) => break Ok(granted),
                Err(e) => {
                    if let Err(e) = retry.after(e).await {
                        break Err(e);
                    }
                }
            }
        };
        match outcome {
            Ok((client, node, sent)) => {
                let granted = self.grant(req, &client, &leases, &node, sent);
                self.let_go_of_mutex(&client, &mutex, &turn).await;
                Ok(granted)
            }
            Err(e) => {
                // The lease first, as Curator does: the next holder of the
                // mutex then counts the leases without ours.
                self.give_up(req, &[(&leases, &lease), (&mutex, &turn)])
                    .await;
                Err(e)
            }
        }
    }

    /// Our lease node among `leases` (made now, or kept in `slot` from an
    /// earlier attempt on this session), and the wait, holding the
    /// semaphore's mutex, until the leases number no more than `permits`:
    /// the node, and when the request that vouches for the grant was sent.
    #[allow(clippy::too_many_arguments)]
    async fn count_in(
        &self,
        client: &zk::Client,
        leases: &Queue,
        req: &AcquireRequest,
        permits: u32,
        slot: &mut Option<(i64, Node)>,
        look_first: bool,
        budget: &WaitBudget,
    ) -> Result<(Node, Instant)> {
        let (session, mut node) = self
            .place(client, leases, req, slot, look_first, budget)
            .await?;
        let ours = owner_prefix(req.owner);
        loop {
            connected(client)?;
            // Vouched for by our create or a check of our lease node, as a
            // turn in a queue is (`recipe.rs`): a follower cut off from the
            // leader could show too few leases.
            let Some((Vouched { sent, children }, watcher)) = self
                .vouched_listing(client, leases, &mut node, true, budget)
                .await?
            else {
                return Err(Error::not_held(&req.name));
            };
            if children.iter().filter(|c| c.starts_with(&ours)).count() > 1 {
                // An attempt applied twice: keep this session's oldest.
                node = self
                    .adopt(client, leases, req.owner, &children)
                    .await?
                    .ok_or_else(|| Error::not_held(&req.name))?;
                *slot = Some((session, node.for_later()));
                continue;
            }
            if !children.contains(&node.name) {
                return Err(Error::not_held(&req.name));
            }
            // Curator's rule: every child of `leases` counts, ours included.
            if children.len() <= permits as usize {
                return Ok((node, sent));
            }
            if budget.is_over() {
                return Err(budget.exhausted(&req.name));
            }
            budget.waiting();
            // The listing sent with our create set no watch: list again,
            // with one.
            let Some(watcher) = watcher else {
                continue;
            };
            // A release of a lease by this backend lists the leases for us
            // (handover.rs).
            let waiter = Waiter {
                session,
                path: format!("{}/{}", leases.parent, node.name),
                czxid: node.czxid,
                lease: None,
            };
            let registration = self.handovers.register(&leases.parent, waiter, budget);
            let Some(event) = budget.race(watcher.changed()).await else {
                return Err(budget.exhausted(&req.name));
            };
            match event.event_type {
                zk::EventType::NodeChildrenChanged | zk::EventType::NodeDeleted => {
                    self.wakeups
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Some(listed) = self.listing_for(registration, budget).await
                        && listed.children.contains(&node.name)
                    {
                        node.vouched = Some(listed);
                    }
                }
                zk::EventType::Session if event.session_state.is_terminated() => {
                    return Err(session_ended_while_waiting(event.session_state));
                }
                _ => {}
            }
        }
    }

    /// Lets go of the semaphore's mutex once our lease is granted, handing
    /// it to the next acquirer of this backend if there is one; a failed
    /// delete is retried in the background while the session lives, since
    /// the node keeps every other acquirer out.
    async fn let_go_of_mutex(
        self: &Arc<Self>,
        client: &zk::Client,
        mutex: &Queue,
        turn: &Option<(i64, Node)>,
    ) {
        let Some((session, node)) = turn else {
            return;
        };
        let path = format!("{}/{}", mutex.parent, node.name);
        let delete = self.delete_and_hand_over(client, &path);
        match self.call("let go of the semaphore's mutex", delete).await {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                self.tidy_parent(client, &mutex.parent).await;
            }
            outcome => {
                tracing::debug!(?outcome, node = %crate::layout::shown(&path), "could not let go of the semaphore's mutex; retrying in the background");
                let (backend, session) = (self.clone(), *session);
                tokio::spawn(async move {
                    backend
                        .keep_deleting(session, &path, &CancellationToken::new())
                        .await
                });
            }
        }
    }
}
