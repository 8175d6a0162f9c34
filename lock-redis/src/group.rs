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
    GROUP_HELD_SCRIPT, GROUP_HOLDERS_SCRIPT, GROUP_RENEW_SCRIPT, JOIN_SCRIPT, LEAVE_TEXT, eval,
};

impl Keys {
    /// The six keys of `name`'s group of `family` in the order the group
    /// scripts take them: holders, writers, waiting writers, tokens, fence,
    /// waiting mark — `prefix` `name` `#sem` (or `#rw`) and a suffix, so a
    /// semaphore, a read-write lock and the mutex of one name never share a
    /// key. In a cluster the name is the hash tag of every one.
    pub fn group(&self, name: &LockName, family: Family) -> [String; 6] {
        let base = format!("{}#{}", self.lock(name), family.tag());
        [
            base.clone(),
            format!("{base}#writers"),
            format!("{base}#writers-waiting"),
            format!("{base}#tokens"),
            format!("{base}#fence"),
            format!("{base}#waiting"),
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
    pub(crate) fn join_invocation(&self, req: &AcquireRequest) -> ScriptInvocation<'static> {
        let permits = match req.kind {
            LockKind::Permit { permits } => permits,
            _ => 0,
        };
        let mut invocation = self.group_invocation(&JOIN_SCRIPT, &req.name, req.kind.family());
        invocation
            .arg(req.owner.to_hex())
            .arg(millis(req.ttl))
            .arg(mode(req.kind))
            .arg(permits)
            .arg(millis(self.keys().waiting_mark()))
            .arg(millis(req.writer_mark()));
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
    /// `owner` has in the group (its grant, its waiting-writer mark), and
    /// announces it to waiters. `true` if a live grant was removed. One
    /// `EVAL`, like every cleanup (`eval`).
    pub async fn leave(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: lock_core::backend::OwnerToken,
        token: Option<FencingToken>,
    ) -> Result<bool> {
        let family = kind.family();
        let (channel, publish) = self.keys().release_channel(name);
        let mut cleanup = eval(LEAVE_TEXT, &self.keys().group(name, family));
        cleanup
            .arg(owner.to_hex())
            .arg(token_arg(token))
            .arg(channel)
            .arg(notice(name, family))
            .arg(publish)
            .arg(mode(kind));
        let done = self.clean_up(cleanup, "release").await?;
        Ok(done == 1)
    }
}
