//! The Lua scripts. Each runs atomically on the server, so every
//! compare-then-act below is one step no other client can interleave with.
//!
//! Keys: `KEYS[1]` is always the lock key, whose value is only the owner
//! token (so any client doing `SET key value NX PX` on it excludes us and is
//! excluded); each script names the others it touches: the name's fence
//! counter, and the mark that somebody waits for the name.

use std::sync::LazyLock;

use redis::Script;

/// `KEYS`: the lock key, the fence counter, the waiting mark. `ARGV`: owner,
/// TTL in ms, how long a failed attempt marks the name as waited on (ms; 0
/// for no mark).
/// Returns the fencing token, or 0 if another owner holds the
/// lock — and then marks the name, in the same atomic step, so the release
/// that frees it announces it.
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
return token
";

/// `ARGV`: owner, TTL in ms. Returns 1 if extended, 0 if not ours.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// `KEYS`: the lock key, the waiting mark. `ARGV`: owner, release channel,
/// lock name, `PUBLISH` or `SPUBLISH` (a cluster's shard channel, in the
/// lock's slot). Deletes the lock only if it is ours, then announces it if
/// anybody waits. One `MGET` reads the owner and the mark together. Returns
/// 1 if deleted.
pub(crate) const RELEASE: &str = r"
local found = redis.call('MGET', KEYS[1], KEYS[2])
if found[1] ~= ARGV[1] then
    return 0
end
redis.call('DEL', KEYS[1])
if found[2] then
    redis.call(ARGV[4], ARGV[2], ARGV[3])
end
return 1
";

/// `KEYS`: the lock key. `ARGV`: owner. [`RELEASE`] for keys nobody waits
/// on by pub/sub (Redlock's): deletes the lock only if it is ours. Returns
/// 1 if deleted.
pub(crate) const RELEASE_UNANNOUNCED: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// `KEYS`: the lock key, the fence counter. Returns `{owner, remaining ms,
/// counter}` or an empty reply when free.
const HOLDER: &str = r"
local owner = redis.call('GET', KEYS[1])
if not owner then
    return {}
end
return {owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0'}
";

pub(crate) static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE));
pub(crate) static RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW));
pub(crate) static HOLDER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(HOLDER));
