//! The Lua scripts. Each runs atomically on the server, so every
//! compare-then-act below is one step no other client can interleave with.
//!
//! Keys: `KEYS[1]` is always the lock key, whose value is only the owner
//! token (so any client doing `SET key value NX PX` on it excludes us and is
//! excluded); each script names the others it touches: the name's fence
//! counter, and the mark that somebody waits for the name.

use std::sync::LazyLock;

use redis::{Cmd, Script};

mod group;

pub(crate) use group::{
    GROUP_HELD_SCRIPT, GROUP_HOLDERS_SCRIPT, GROUP_RENEW_SCRIPT, JOIN_SCRIPT, LEAVE_TEXT,
    LEAVE_UNADMITTING_TEXT,
};

/// `KEYS`: the lock key, the fence counter, the waiting mark, and for an
/// election the value key. `ARGV`: owner, TTL in ms, how long a failed
/// attempt marks the name as waited on (ms; 0 for no mark), and for an
/// election the value, the channel, `PUBLISH` or `SPUBLISH`, the notice.
/// Returns the fencing token, or 0 if another owner holds the
/// lock — and then marks the name, in the same atomic step, so the release
/// that frees it announces it.
///
/// An election is a mutex of its own keys: its leader's value is set with
/// the grant, with the lock's TTL, and every new leader is announced to
/// the observers (who set no mark: elections change seldom).
///
/// The token is `max(last token + 1, server time in ms × 1000)`: strictly
/// greater than the last token of this server, and greater than any token
/// issued before a restart that lost the counter (no persistence), a restart
/// from an older snapshot, or a failover to a replica that had not seen the
/// last grant — each takes more than a millisecond, and no name is granted a
/// thousand times in one — provided the server's clock has not gone back
/// past it. The server's time is read from the expiry `SET … PX` just gave
/// the lock key (`PEXPIRETIME`, Redis 7), an integer reply, cheaper than
/// `TIME`'s pair of strings; the counter is written back only when the clock
/// has moved past it, at most once per millisecond. When the same owner asks
/// again (its earlier reply was lost), the lock is its already and the token
/// is the counter as it is.
///
/// Each `redis.call` costs the server about a microsecond on the path of
/// every acquire, and on two cores that shows in the round trip, so the
/// common case (the lock is free, the counter ahead) makes three.
const ACQUIRE: &str = r"
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    if redis.call('GET', KEYS[1]) == ARGV[1] then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        if KEYS[4] then
            redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[2])
        end
        return tonumber(redis.call('GET', KEYS[2]))
    end
    if ARGV[3] ~= '0' then
        redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
    end
    return 0
end
local token = redis.call('INCR', KEYS[2])
local now = (redis.call('PEXPIRETIME', KEYS[1]) - ARGV[2]) * 1000
if token < now then
    token = now
    redis.call('SET', KEYS[2], string.format('%d', token))
end
if KEYS[4] then
    redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[2])
    redis.call(ARGV[6], ARGV[5], ARGV[7])
end
return token
";

/// `KEYS`: the lock key, and an election's value key. `ARGV`: owner, TTL
/// in ms. Returns 1 if extended, 0 if not ours.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    if KEYS[2] then
        redis.call('PEXPIRE', KEYS[2], ARGV[2])
    end
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// `KEYS`: the lock key, the waiting mark, and an election's value key.
/// `ARGV`: owner, release channel, notice, `PUBLISH` or `SPUBLISH` (a
/// cluster's shard channel, in the lock's slot). Deletes the lock (and the
/// value) only if it is ours, then announces it if anybody waits — an
/// election's release always, for its observers. One `MGET` reads the
/// owner and the mark together. Returns 1 if deleted.
pub(crate) const RELEASE: &str = r"
local found = redis.call('MGET', KEYS[1], KEYS[2])
if found[1] ~= ARGV[1] then
    return 0
end
redis.call('DEL', KEYS[1])
if KEYS[3] then
    redis.call('DEL', KEYS[3])
end
if found[2] or KEYS[3] then
    redis.call(ARGV[4], ARGV[2], ARGV[3])
end
return 1
";

/// `KEYS`: the lock key, and an election's value key. `ARGV`: owner.
/// [`RELEASE`] for keys nobody waits on by pub/sub (Redlock's): deletes
/// the lock (and the value) only if it is ours. Returns 1 if deleted.
pub(crate) const RELEASE_UNANNOUNCED: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
if KEYS[2] then
    redis.call('DEL', KEYS[2])
end
return redis.call('DEL', KEYS[1])
";

/// `KEYS`: the lock key, the fence counter, and an election's value key.
/// Returns `{owner, remaining ms, counter}` (and the value, for an
/// election) or an empty reply when free.
const HOLDER: &str = r"
local owner = redis.call('GET', KEYS[1])
if not owner then
    return {}
end
local found = {owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0'}
if KEYS[3] then
    table.insert(found, redis.call('GET', KEYS[3]) or '')
end
return found
";

/// `KEYS`: an election's lock key, fence counter and value key. `ARGV`:
/// owner, token, value, and where there are observers to tell the channel,
/// `PUBLISH` or `SPUBLISH`, the notice. Replaces the value, with the
/// lock's time left, only while the lock is the owner's with this token
/// (the counter is the token of the latest grant). Returns 1 if replaced.
const PROCLAIM: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2] then
    return 0
end
redis.call('SET', KEYS[3], ARGV[3], 'PX', math.max(redis.call('PTTL', KEYS[1]), 1))
if ARGV[4] then
    redis.call(ARGV[5], ARGV[4], ARGV[6])
end
return 1
";

/// Redlock's grant of an election on one master, whose term every master
/// of the majority must store alike, so the client proposes it.
/// `KEYS`: the election's lock key, fence counter (the latest term
/// granted) and value key. `ARGV`: owner, TTL ms, value, proposed term.
/// Returns the term if granted (the owner asking again is granted again,
/// with the new term), 0 if another owner holds the lock, or minus the
/// latest term if the proposal is not above it: terms only grow on a
/// master, so a later leader's term is above every earlier leader's term
/// on the master their majorities share.
const ELECT: &str = r"
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then
    return 0
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[4]) <= last then
    return -last
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
return tonumber(ARGV[4])
";

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW));
pub(crate) static HOLDER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(HOLDER));
pub(crate) static PROCLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PROCLAIM));
pub(crate) static ELECT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ELECT));

/// `EVAL` of `text` on `keys`; the caller adds the `ARGV`. For every
/// cleanup (a release, an abandon, a grant given back): each must reach
/// the server as one command. A script run by its hash (`EVALSHA`) on a
/// server that lost its script cache (a restart, `SCRIPT FLUSH`) fails with
/// `NOSCRIPT`, and the fallback (`SCRIPT LOAD`, then `EVALSHA` again) takes
/// two more round trips, which a per-node limit (Redlock's) or a cancelled
/// future can cut off: the grant or waiting mark would then stay until it
/// expires, and a grant that reached the server late would outlive the
/// cleanup queued behind it. The server caches the script by its hash
/// either way, so the text costs only the bytes.
pub(crate) fn eval(text: &str, keys: &[String]) -> Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(text).arg(keys.len()).arg(keys);
    cmd
}
