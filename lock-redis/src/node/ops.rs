//! The mutex's operations on one server, and the election's, which is a
//! mutex of its own keys (`Keys::mutex`): each one script, or one `EVAL`
//! for a cleanup, under the node's timeout.

use std::time::Duration;

use lock_core::backend::OwnerToken;
use lock_core::backend::{AcquireRequest, Lease, millis};
use lock_core::{FencingToken, LockKind, LockName, Result};
use redis::{ErrorKind, ScriptInvocation, ServerErrorKind};

use super::{Node, NodeHolder};
use crate::group::Joining;
use crate::keys::{Notice, mutex_like};
use crate::scripts::{
    ACQUIRE_SCRIPT, HOLDER_SCRIPT, RELEASE, RELEASE_UNANNOUNCED, RENEW_SCRIPT, eval,
};

impl Node {
    /// Takes the lock for `owner` if it is free with a bare
    /// `SET key owner NX PX ttl`, and reads the server's clock (`TIME`) in
    /// the same pipeline; returns that time in microseconds as the token,
    /// or `None` if the key exists.
    ///
    /// A Lua script costs the server several times what these two commands
    /// do, which Redlock pays on every master; its tokens are best effort
    /// anyway, so it takes this one. The clock alone orders two grants of
    /// one name on one server, as long as the clock does not go back: the
    /// second `SET` can only follow the first holder's release, which came
    /// after the first reply. The token survives a restart that loses
    /// every key, but there is no counter to read it back from
    /// ([`Node::holder`]'s `counter` is not it), and the same owner asking
    /// again is refused like anybody else.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub async fn acquire_stamped(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<FencingToken>> {
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(self.keys.lock(name))
            .arg(owner.to_hex())
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl))
            .cmd("TIME");
        let (set, (seconds, micros)): (Option<String>, (u64, u64)) = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail("acquire", e))?;
        Ok(set.map(|_| FencingToken::new(seconds * 1_000_000 + micros)))
    }

    /// Grants `req` of any kind if it is free (or already `req.owner`'s):
    /// the lock's token, or `None` if it is held.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub async fn grant(&self, req: &AcquireRequest) -> Result<Option<FencingToken>> {
        let joining = if self.keys.announces() {
            Joining::Admitted
        } else {
            Joining::Unadmitted
        };
        self.grant_as(req, joining).await
    }

    /// [`Node::grant`], joining a group as `joining` says.
    pub(crate) async fn grant_as(
        &self,
        req: &AcquireRequest,
        joining: Joining,
    ) -> Result<Option<FencingToken>> {
        let invocation = if mutex_like(req.kind) {
            self.acquire_invocation(req)
        } else {
            self.join_invocation(req, joining)
        };
        let token: u64 = self.run(invocation, "acquire").await?;
        Ok((token > 0).then_some(FencingToken::new(token)))
    }

    /// Runs a script on this node's connection.
    pub(crate) async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: ScriptInvocation<'_>,
        operation: &'static str,
    ) -> Result<T> {
        invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail(operation, e))
    }

    /// The acquire script for `req`, a mutex's or an election's (whose
    /// grant sets the leader's value and tells the observers).
    pub(crate) fn acquire_invocation(&self, req: &AcquireRequest) -> ScriptInvocation<'static> {
        let keys = self.keys.mutex(&req.name, req.kind);
        let mut invocation = ACQUIRE_SCRIPT.prepare_invoke();
        invocation
            .key(keys.lock)
            .key(keys.fence)
            .key(keys.waiting)
            .arg(req.owner.to_hex())
            .arg(millis(req.ttl))
            .arg(millis(self.keys.waiting_mark()));
        if let Some(value) = keys.value {
            let (channel, publish) = self.keys.release_channel(&req.name);
            invocation
                .key(value)
                .arg(&req.value)
                .arg(channel)
                .arg(publish)
                .arg(Notice::Elected.payload(&req.name));
        }
        invocation
    }

    /// `invocation` followed by `WAIT replicas timeout`, sent as one
    /// pipeline on one connection: `WAIT` then counts the replicas that
    /// have the script's write. Sent separately, a reconnect between the
    /// two would put `WAIT` on a connection that wrote nothing, which every
    /// replica has "acknowledged"; in one pipeline, a lost connection fails
    /// both. Returns the script's answer and how many replicas confirmed.
    pub(crate) async fn confirmed<T: redis::FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        (replicas, timeout): (u32, Duration),
        operation: &'static str,
    ) -> Result<(T, u32)> {
        let mut pipe = redis::pipe();
        pipe.invoke_script(invocation)
            .cmd("WAIT")
            .arg(replicas)
            .arg(millis(timeout));
        let mut conn = self.conn.clone();
        let mut sent = pipe.query_async(&mut conn).await;
        if matches!(&sent, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            // A restarted server forgot the script; the failed `EVALSHA`
            // wrote nothing.
            invocation
                .load_async(&mut conn)
                .await
                .map_err(|e| self.fail(operation, e))?;
            sent = pipe.query_async(&mut conn).await;
        }
        sent.map_err(|e| self.fail(operation, e))
    }

    /// Extends `lease`'s lock (and an election's value) if its owner still
    /// holds it.
    pub async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        let done: i64 = self.run(self.renew_invocation(lease, ttl), "renew").await?;
        Ok(done == 1)
    }

    pub(crate) fn renew_invocation(
        &self,
        lease: &Lease,
        ttl: Duration,
    ) -> ScriptInvocation<'static> {
        let keys = self.keys.mutex(lease.name(), lease.kind());
        let mut invocation = RENEW_SCRIPT.prepare_invoke();
        invocation.key(keys.lock);
        if let Some(value) = keys.value {
            invocation.key(value);
        }
        invocation.arg(lease.owner().to_hex()).arg(millis(ttl));
        invocation
    }

    /// Deletes `kind`'s lock of `name` (and an election's value) if
    /// `owner` holds it, and announces the release; as one `EVAL`, like
    /// every cleanup (`eval`).
    ///
    /// Without waiting marks (Redlock), nothing is announced, and the
    /// script is the bare compare-and-delete.
    pub async fn release(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
    ) -> Result<bool> {
        let keys = self.keys.mutex(name, kind);
        let cleanup = if self.keys.announces() {
            let (channel, publish) = self.keys.release_channel(name);
            let notice = match keys.value {
                Some(_) => Notice::Resigned,
                None => Notice::Released,
            };
            let mut cmd = eval(
                RELEASE,
                &[keys.lock, keys.waiting]
                    .into_iter()
                    .chain(keys.value)
                    .collect::<Vec<_>>(),
            );
            cmd.arg(owner.to_hex())
                .arg(channel)
                .arg(notice.payload(name))
                .arg(publish);
            cmd
        } else {
            let mut cmd = eval(
                RELEASE_UNANNOUNCED,
                &[keys.lock]
                    .into_iter()
                    .chain(keys.value)
                    .collect::<Vec<_>>(),
            );
            cmd.arg(owner.to_hex());
            cmd
        };
        let done: i64 = self.clean_up(cleanup, "release").await?;
        Ok(done == 1)
    }

    /// Sends a cleanup made by [`eval`] on this node's connection.
    pub(crate) async fn clean_up<T: redis::FromRedisValue>(
        &self,
        cleanup: redis::Cmd,
        operation: &'static str,
    ) -> Result<T> {
        cleanup
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail(operation, e))
    }

    /// Whether `owner` holds `kind`'s lock of `name`: its key is there,
    /// unexpired, with `owner` as its value.
    pub async fn holds(&self, name: &LockName, kind: LockKind, owner: OwnerToken) -> Result<bool> {
        let value: Option<String> = redis::cmd("GET")
            .arg(self.keys.mutex(name, kind).lock)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.fail("check the owner", e))?;
        Ok(value.is_some_and(|v| v == owner.to_hex()))
    }

    /// The current holder of `kind`'s lock of `name`, if any (with the
    /// value, for an election).
    pub async fn holder(&self, name: &LockName, kind: LockKind) -> Result<Option<NodeHolder>> {
        let keys = self.keys.mutex(name, kind);
        let mut invocation = HOLDER_SCRIPT.prepare_invoke();
        invocation.key(keys.lock).key(keys.fence);
        if let Some(value) = keys.value {
            invocation.key(value);
        }
        let reply: Vec<String> = self.run(invocation, "holder").await?;
        let (owner, pttl, counter, value) = match reply.as_slice() {
            [owner, pttl, counter] => (owner, pttl, counter, None),
            [owner, pttl, counter, value] => (owner, pttl, counter, Some(value.clone())),
            _ => return Ok(None),
        };
        Ok(Some(NodeHolder {
            owner: owner.clone(),
            remaining: Duration::from_millis(pttl.parse::<u64>().unwrap_or(0)),
            counter: counter.parse().unwrap_or(0),
            value,
        }))
    }
}
