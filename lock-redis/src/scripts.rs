//! The Lua scripts. Each runs atomically on the server, so every
//! compare-then-act below is one step no other client can interleave with.
//!
//! Keys: `KEYS[1]` is always the lock key, whose value is only the owner
//! token (so any client doing `SET key value NX PX` on it excludes us and is
//! excluded); each script names the others it touches: the name's fence
//! counter, and the mark that somebody waits for the name.

use std::sync::LazyLock;

use redis::{Cmd, Script};

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

/// The shared prologue of the group scripts (semaphores and read-write
/// locks) that read the group: the server's time in ms, expired members
/// dropped from the member sets the mode reads, and `keep`, which makes a
/// key outlive its latest member (never shortening it) so that an
/// abandoned name's keys go away.
///
/// `KEYS` of every group script: 1 the holders (a semaphore's permits, a
/// read-write lock's readers), 2 the writers, 3 the waiting writers — sorted
/// sets of owner tokens scored by expiry in server ms — 4 the tokens (a
/// hash, owner → fencing token), 5 the fence counter, 6 the waiting mark.
/// `ARGV[3]` of every one is the mode: a semaphore's (`p`) has members in
/// the holders alone, so its scripts leave the other two sets alone, since
/// every `redis.call` is on the path of every acquire.
///
/// `keep` sets the expiry only if it is later (`GT`) where the key has one,
/// else (a new key, which `GT` reads as never expiring) sets it (`NX`):
/// one call when the first one tried applies, so a caller that knows the
/// key is `fresh` tries `NX` first.
const GROUP_PROLOGUE: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local last = 3
if ARGV[3] == 'p' then
    last = 1
end
for i = 1, last do
    local gone = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now)
    if #gone > 0 then
        redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
        if i < 3 then
            for _, owner in ipairs(gone) do
                redis.call('HDEL', KEYS[4], owner)
            end
        end
    end
end
local function keep(key, at, fresh)
    local first, second = 'GT', 'NX'
    if fresh then
        first, second = 'NX', 'GT'
    end
    if redis.call('PEXPIREAT', key, at, first) == 0 then
        redis.call('PEXPIREAT', key, at, second)
    end
end
";

/// `ARGV`: owner, TTL ms, mode (`p` permit, `r` read, `w` write), permits,
/// waiting mark ms (0 for none), how long a refused writer stays marked as
/// waiting (ms). Returns the fencing token, or 0 if refused.
///
/// A permit is free while fewer than `permits` hold one. A reader gets in
/// while no writer holds and none waits; a writer, while nobody holds. A
/// refused writer is added to the waiting writers, which keeps new readers
/// out until it gets in, gives up (abandon) or stops asking. The same owner
/// asking again gets its grant back, renewed. Tokens follow the mutex's
/// rule (see [`ACQUIRE`]): the counter, floored by the server's clock in
/// µs, so they grow across restarts that lose the counter.
const JOIN: &str = r"
local owner, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local mine = KEYS[1]
if mode == 'w' then
    mine = KEYS[2]
end
local expires = now + ttl
local function again()
    redis.call('ZADD', mine, expires, owner)
    keep(mine, expires)
    keep(KEYS[4], expires)
    return tonumber(redis.call('HGET', KEYS[4], owner))
end
local free, fresh
if mode == 'p' then
    local held = redis.call('ZCARD', KEYS[1])
    free, fresh = held < tonumber(ARGV[4]), held == 0
elseif mode == 'r' then
    free = redis.call('ZCARD', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[3]) == 0
else
    free = redis.call('ZCARD', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[2]) == 0
end
if not free then
    if redis.call('ZSCORE', mine, owner) then
        return again()
    end
    if mode == 'w' then
        local waits = now + tonumber(ARGV[6])
        redis.call('ZADD', KEYS[3], waits, owner)
        keep(KEYS[3], waits)
    end
    if ARGV[5] ~= '0' then
        redis.call('SET', KEYS[6], '1', 'PX', ARGV[5])
    end
    return 0
end
if mode == 'w' then
    redis.call('ZREM', KEYS[3], owner)
end
if redis.call('ZADD', mine, 'NX', expires, owner) == 0 then
    return again()
end
local token = redis.call('INCR', KEYS[5])
if token < now * 1000 then
    token = now * 1000
    redis.call('SET', KEYS[5], string.format('%d', token))
end
redis.call('HSET', KEYS[4], owner, string.format('%d', token))
keep(mine, expires, fresh)
keep(KEYS[4], expires, fresh)
return token
";

/// `ARGV`: owner, token (empty: any — Redlock's masters each gave the
/// grant a token of their own, and the owner token names one grant
/// anyway), mode, TTL ms. Extends the member's expiry if it is still there,
/// unexpired, with this token. Returns 1 if extended.
const GROUP_RENEW: &str = r"
local mine = KEYS[1]
if ARGV[3] == 'w' then
    mine = KEYS[2]
end
if not redis.call('ZSCORE', mine, ARGV[1])
    or (ARGV[2] ~= '' and redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[2]) then
    return 0
end
local expires = now + tonumber(ARGV[4])
redis.call('ZADD', mine, expires, ARGV[1])
keep(mine, expires)
keep(KEYS[4], expires)
return 1
";

/// `ARGV`: owner, token (empty: any, as in [`GROUP_RENEW`]), mode. Returns
/// 1 if the member is there, unexpired, with this token. Reads only, apart
/// from dropping expired members.
const GROUP_HELD: &str = r"
local mine = KEYS[1]
if ARGV[3] == 'w' then
    mine = KEYS[2]
end
if redis.call('ZSCORE', mine, ARGV[1])
    and (ARGV[2] == '' or redis.call('HGET', KEYS[4], ARGV[1]) == ARGV[2]) then
    return 1
end
return 0
";

/// `KEYS`: the group's (see [`GROUP_PROLOGUE`]). `ARGV`: owner, token
/// (empty: any — an abandon), channel, notice, `PUBLISH` or `SPUBLISH`,
/// mode. Removes the owner's grant (with this token) or, without a token,
/// everything the owner has in the group, waiting writer included;
/// announces it if anybody waits. Returns 1 if a live grant was removed.
///
/// It reads no more of the group than the owner's own members: a member
/// is live while its expiry (its score) is ahead of the server's clock,
/// which is read only once one is found. Expired members of others stay
/// for the next grant's prologue to drop.
const LEAVE: &str = r"
local owner = ARGV[1]
if ARGV[2] ~= '' and redis.call('HGET', KEYS[4], owner) ~= ARGV[2] then
    return 0
end
local first, last = 1, 1
if ARGV[6] == 'w' then
    first, last = 2, 3
end
local now
local live = 0
for i = first, last do
    local expires = redis.call('ZSCORE', KEYS[i], owner)
    if expires then
        redis.call('ZREM', KEYS[i], owner)
        if not now then
            local clock = redis.call('TIME')
            now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
        end
        if tonumber(expires) > now then
            live = 1
        end
    end
end
redis.call('HDEL', KEYS[4], owner)
if live == 1 and redis.call('EXISTS', KEYS[6]) == 1 then
    redis.call(ARGV[5], ARGV[3], ARGV[4])
end
return live
";

/// The group scripts with their prologue.
fn group(body: &str) -> Script {
    Script::new(&with_prologue(body))
}

fn with_prologue(body: &str) -> String {
    format!("{GROUP_PROLOGUE}{body}")
}

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

pub(crate) static JOIN_SCRIPT: LazyLock<Script> = LazyLock::new(|| group(JOIN));

/// Reads only. `KEYS`: the group's (see `GROUP_PROLOGUE`). Returns, for every member whose lease still runs by the
/// server's clock, four strings: `1` (a holder) or `2` (a writer), the
/// owner, ms left, the token.
const GROUP_HOLDERS: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local out = {}
for i = 1, 2 do
    local members = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. now, '+inf', 'WITHSCORES')
    for j = 1, #members, 2 do
        local owner = members[j]
        table.insert(out, tostring(i))
        table.insert(out, owner)
        table.insert(out, tostring(math.floor(tonumber(members[j + 1]) - now)))
        table.insert(out, redis.call('HGET', KEYS[4], owner) or '0')
    end
end
return out
";

pub(crate) static GROUP_HOLDERS_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(GROUP_HOLDERS));
pub(crate) static GROUP_RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| group(GROUP_RENEW));
pub(crate) static GROUP_HELD_SCRIPT: LazyLock<Script> = LazyLock::new(|| group(GROUP_HELD));
/// [`LEAVE`], sent as text: a cleanup (see [`eval`]).
pub(crate) const LEAVE_TEXT: &str = LEAVE;
