//! Semaphores and read-write locks on one Redis server: the members of a
//! name's group in sorted sets scored by expiry, changed only by the group
//! scripts in `scripts.rs`.

use std::time::Duration;

use lock_core::backend::Family;
use lock_core::backend::{AcquireRequest, Lease, millis};
use lock_core::{FencingToken, LockKind, LockName, Result};
use redis::ScriptInvocation;

use crate::keys::Notice;
use crate::node::{Keys, Node};
use crate::scripts::{
    GROUP_HELD_SCRIPT, GROUP_HOLDERS_SCRIPT, GROUP_RENEW_SCRIPT, JOIN_SCRIPT, LEAVE_TEXT,
    LEAVE_UNADMITTING_TEXT, eval,
};

impl Keys {
    /// The eight keys of `name`'s group of `family` in the order the group
    /// scripts take them: holders, writers, waiting writers, tokens, fence,
    /// waiting mark, the other waiters, the waiters' TTLs — `prefix` `name`
    /// `#sem` (or `#rw`) and a suffix, so a semaphore, a read-write lock and
    /// the mutex of one name never share a key. In a cluster the name is
    /// the hash tag of every one.
    pub fn group(&self, name: &LockName, family: Family) -> [String; 8] {
        let base = format!("{}#{}", self.lock(name), family.tag());
        [
            base.clone(),
            format!("{base}#writers"),
            format!("{base}#writers-waiting"),
            format!("{base}#tokens"),
            format!("{base}#fence"),
            format!("{base}#waiting"),
            format!("{base}#waiters"),
            format!("{base}#waiter-ttls"),
        ]
    }
}

/// The mode argument of the group scripts.
fn mode(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Read => "r",
        LockKind::Write => "w",
        _ => "p",
    }
}

/// A semaphore's size; 0 for the other kinds.
fn permits(kind: LockKind) -> u32 {
    match kind {
        LockKind::Permit { permits } => permits,
        _ => 0,
    }
}

/// Whether a join is taken as a waiter that a release may admit (see
/// [`Node::leave`]): a reader's or a writer's. A permit never is: a
/// permit freed goes to whoever asks first, which is most often its
/// holder asking again, with no wake-up to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Joining {
    /// Not admitted: it waits by retrying (Redlock, grants confirmed on
    /// replicas).
    Unadmitted,
    /// Admitted if refused.
    Admitted,
}

impl Joining {
    fn arg(self) -> &'static str {
        match self {
            Self::Unadmitted => "0",
            Self::Admitted => "1",
        }
    }
}

/// A token as the group scripts take it: empty for "any".
fn token_arg(token: Option<FencingToken>) -> String {
    token.map(|t| t.get().to_string()).unwrap_or_default()
}

/// What a release of the group announces: a release that wakes one local
/// waiter (a freed permit admits one), or every one (a read-write lock's
/// release may admit every reader).
fn notice(name: &LockName, family: Family) -> String {
    match family {
        Family::ReadWrite => Notice::ReleasedAll.payload(name),
        _ => Notice::Released.payload(name),
    }
}

impl Node {
    fn group_invocation(
        &self,
        script: &'static redis::Script,
        name: &LockName,
        family: Family,
    ) -> ScriptInvocation<'static> {
        let mut invocation = script.prepare_invoke();
        for key in self.keys().group(name, family) {
            invocation.key(key);
        }
        invocation
    }

    /// The join script for `req`, as [`Node::grant`] and the acquire
    /// confirmed by `WAIT` send it.
    pub(crate) fn join_invocation(
        &self,
        req: &AcquireRequest,
        joining: Joining,
    ) -> ScriptInvocation<'static> {
        let permits = permits(req.kind);
        let mut invocation = self.group_invocation(&JOIN_SCRIPT, &req.name, req.kind.family());
        invocation
            .arg(req.owner.to_hex())
            .arg(millis(req.ttl))
            .arg(mode(req.kind))
            .arg(permits)
            .arg(millis(self.keys().waiting_mark()))
            .arg(millis(req.writer_mark()))
            .arg(joining.arg())
            .arg(self.client());
        invocation
    }

    /// Extends a member's grant if it is still there, with `token` if one is
    /// given (Redlock gives none: each master drew its own).
    pub async fn renew_member(
        &self,
        lease: &Lease,
        token: Option<FencingToken>,
        ttl: Duration,
    ) -> Result<bool> {
        let invocation = self.renew_member_invocation(lease, token, ttl);
        let done: i64 = self.run(invocation, "renew").await?;
        Ok(done == 1)
    }

    /// The renewal script [`Node::renew_member`] runs, as the renewal
    /// confirmed by `WAIT` sends it too.
    pub(crate) fn renew_member_invocation(
        &self,
        lease: &Lease,
        token: Option<FencingToken>,
        ttl: Duration,
    ) -> ScriptInvocation<'static> {
        let mut invocation =
            self.group_invocation(&GROUP_RENEW_SCRIPT, lease.name(), lease.kind().family());
        invocation
            .arg(lease.owner().to_hex())
            .arg(token_arg(token))
            .arg(mode(lease.kind()))
            .arg(millis(ttl));
        invocation
    }

    /// The members of `name`'s group of `family` whose leases still run:
    /// for each, whether it is a writer, its owner, the time left and its
    /// token.
    pub async fn group_holders(
        &self,
        name: &LockName,
        family: Family,
    ) -> Result<Vec<(bool, String, Duration, FencingToken)>> {
        let invocation = self.group_invocation(&GROUP_HOLDERS_SCRIPT, name, family);
        let reply: Vec<String> = self.run(invocation, "holders").await?;
        Ok(reply
            .chunks_exact(4)
            .map(|m| {
                (
                    m[0] == "2",
                    m[1].clone(),
                    Duration::from_millis(m[2].parse().unwrap_or(0)),
                    FencingToken::new(m[3].parse().unwrap_or(0)),
                )
            })
            .collect())
    }

    /// Whether a member's grant is still there, unexpired, with `token` if
    /// one is given.
    pub async fn holds_member(&self, lease: &Lease, token: Option<FencingToken>) -> Result<bool> {
        let mut invocation =
            self.group_invocation(&GROUP_HELD_SCRIPT, lease.name(), lease.kind().family());
        invocation
            .arg(lease.owner().to_hex())
            .arg(token_arg(token))
            .arg(mode(lease.kind()));
        let held: i64 = self.run(invocation, "check the owner").await?;
        Ok(held == 1)
    }

    /// Removes `owner`'s grant with `token`, or with no token everything
    /// `owner` has in the group (its grant, its marks as a waiter), and
    /// announces it to waiters; with `admit`, a read-write lock's release
    /// grants in the same step the waiters it lets in that registered to be
    /// admitted. One `EVAL`, like every cleanup (`eval`).
    pub async fn leave(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: lock_core::backend::OwnerToken,
        token: Option<FencingToken>,
        admit: bool,
    ) -> Result<Left> {
        let family = kind.family();
        let (channel, publish) = self.keys().release_channel(name);
        // A permit is never admitted, so its release sends the script
        // without the admitting step, a third of the bytes.
        let text = if self.keys().announces() && mode(kind) != "p" {
            &LEAVE_TEXT
        } else {
            &LEAVE_UNADMITTING_TEXT
        };
        let mut cleanup = eval(text, &self.keys().group(name, family));
        cleanup
            .arg(owner.to_hex())
            .arg(token_arg(token))
            .arg(channel)
            .arg(notice(name, family))
            .arg(publish)
            .arg(mode(kind))
            .arg(match (admit, self.keys().announces()) {
                (true, _) => "1",
                (false, true) => "0",
                (false, false) => "-",
            })
            .arg(self.client());
        let reply: Vec<String> = self.clean_up(cleanup, "release").await?;
        let live = reply.first().is_some_and(|l| l == "1");
        let admitted = reply
            .get(1..)
            .unwrap_or_default()
            .chunks_exact(2)
            .filter_map(|m| {
                let owner = lock_core::backend::OwnerToken::from_hex(&m[0]).ok()?;
                Some((owner, FencingToken::new(m[1].parse().ok()?)))
            })
            .collect();
        Ok(Left { live, admitted })
    }
}

/// What a release of a group member did.
#[derive(Debug)]
pub struct Left {
    /// Whether a live grant was removed.
    pub live: bool,
    /// The waiters it admitted, with their tokens.
    pub admitted: Vec<(lock_core::backend::OwnerToken, FencingToken)>,
}
