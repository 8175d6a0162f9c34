//! The group scripts: semaphores and read-write locks, whose members are
//! kept in sorted sets scored by expiry.

use std::sync::LazyLock;

use redis::Script;

/// The shared prologue of the group scripts (semaphores and read-write
/// locks) that read the group: the server's time in ms, expired members
/// dropped from the member sets the mode reads, and `keep`, which makes a
/// key outlive its latest member (never shortening it) so that an
/// abandoned name's keys go away.
///
/// `KEYS` of every group script: 1 the holders (a semaphore's permits, a
/// read-write lock's readers), 2 the writers, 3 the waiting writers — sorted
/// sets of owner tokens scored by expiry in server ms — 4 the tokens (a
/// hash, owner → fencing token), 5 the fence counter, 6 the waiting mark,
/// 7 the other waiters a release may admit (readers, permits; a sorted set
/// scored by when their mark lapses), 8 the TTL each waiter a release may
/// admit asked for (a hash, owner → ms; writers' too).
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
";

/// `keep(key, at, fresh)`: see [`GROUP_PROLOGUE`].
const KEEP: &str = r"
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
/// waiting (ms), `1` if a release may admit this owner while it waits (see
/// [`LEAVE`]; never a permit), and the client's mark. Returns the fencing
/// token, or 0 if refused.
///
/// A refused waiter that a release may admit registers its TTL and client
/// instead of setting the waiting mark, which only waiters that are not
/// admitted set: a release announces itself to those, and to admitted
/// waiters of other clients.
///
/// A permit is free while fewer than `permits` hold one. A reader gets in
/// while no writer holds and none waits; a writer, while nobody holds. A
/// refused writer is added to the waiting writers, which keeps new readers
/// out until it gets in, gives up (abandon) or stops asking. The same owner
/// asking again gets its grant back, renewed. Tokens follow the mutex's
/// rule (see [`super::ACQUIRE`]): the counter, floored by the server's clock in
/// µs, so they grow across restarts that lose the counter.
const JOIN: &str = r"
local owner, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local admittable = ARGV[7] == '1' and mode ~= 'p'
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
    local waits
    if mode == 'w' then
        waits = now + tonumber(ARGV[6])
        redis.call('ZADD', KEYS[3], waits, owner)
        keep(KEYS[3], waits)
    elseif admittable then
        waits = now + tonumber(ARGV[5])
        redis.call('ZADD', KEYS[7], waits, owner)
        keep(KEYS[7], waits)
    end
    if admittable then
        redis.call('HSET', KEYS[8], owner, ARGV[2] .. ' ' .. ARGV[8])
        keep(KEYS[8], waits)
    elseif ARGV[5] ~= '0' then
        redis.call('SET', KEYS[6], '1', 'PX', ARGV[5])
    end
    return 0
end
if mode == 'w' then
    redis.call('ZREM', KEYS[3], owner)
end
if admittable and redis.call('HDEL', KEYS[8], owner) == 1 and mode ~= 'w' then
    redis.call('ZREM', KEYS[7], owner)
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
/// mode, `1` to admit waiters (`0` not to, `-` for a client that nobody
/// waits on by pub/sub: Redlock's), the client's mark (see [`JOIN`]). Removes
/// the owner's grant (with this token) or, without a token, everything the
/// owner has in the group, its marks as a waiter included. Returns the
/// strings `1` if a live grant was removed (else `0`), then an owner and
/// its token for every waiter admitted.
///
/// Admitting is a read-write lock's hand-over: when a live grant goes
/// while waiters are registered, the ones it lets in by the rule of
/// [`JOIN`] are granted here, in the same atomic step, with the TTL each
/// registered when it was refused: the first waiting writer once nobody
/// holds, or, while no writer holds or waits, every waiting reader. A
/// waiting writer that did not register (a client that is not admitted:
/// Redlock's, or one confirming grants on replicas) keeps its mark and
/// holds the readers back, as it would without a hand-over.
///
/// The release is announced while the waiting mark says that waiters who
/// are not admitted wait, and when it admitted a waiter of another client
/// (or, not admitting, found waiters registered); the notice names whom
/// it admitted, `owner=token` after the name, space-separated, so that a
/// waiter in another process has its grant without asking. A release that
/// admits only its own client's waiters tells them itself, by its reply.
///
/// It reads no more of the group than the owner's own members and what it
/// admits: a member is live while its expiry (its score) is ahead of the
/// server's clock, which is read only once one is found. Expired members of
/// others stay for the next grant's prologue to drop.
const LEAVE: &str = r"
local owner = ARGV[1]
if ARGV[2] ~= '' and redis.call('HGET', KEYS[4], owner) ~= ARGV[2] then
    return {'0'}
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
if ARGV[2] == '' and ARGV[6] ~= 'p' and redis.call('HDEL', KEYS[8], owner) == 1 then
    redis.call('ZREM', KEYS[7], owner)
end
local out = {tostring(live)}
if live == 0 then
    return out
end
local announce = redis.call('EXISTS', KEYS[6]) == 1
";

/// [`LEAVE`]'s admitting step, between its removal and its notice.
const LEAVE_ADMIT: &str = r"
if ARGV[6] ~= 'p' and ARGV[7] ~= '-' and redis.call('EXISTS', KEYS[8]) == 1 then
    if ARGV[7] ~= '1' then
        announce = true
    else
        -- Admits the waiters `whos` of `waiting` (a few hundred at most: a
        -- Lua call takes only so many arguments) into `set`, with few calls
        -- beside one read of each one's TTL: their tokens are the
        -- counter's next ones. Only commands a least-privilege user already
        -- has (lock-redis's README) are used.
        local function admit(waiting, set, whos)
            local found = {}
            for i, who in ipairs(whos) do
                found[i] = redis.call('HGET', KEYS[8], who)
            end
            redis.call('ZREM', waiting, unpack(whos))
            redis.call('HDEL', KEYS[8], unpack(whos))
            local members, latest = {}, 0
            for i, who in ipairs(whos) do
                local ttl, client = string.match(found[i] or '', '^(%d+) (.*)$')
                if ttl then
                    if client ~= ARGV[8] then
                        announce = true
                    end
                    local expires = now + tonumber(ttl)
                    latest = math.max(latest, expires)
                    table.insert(members, expires)
                    table.insert(members, who)
                end
            end
            local n = #members / 2
            if n == 0 then
                return
            end
            local first = math.max(tonumber(redis.call('GET', KEYS[5]) or '0') + 1, now * 1000)
            redis.call('SET', KEYS[5], string.format('%d', first + n - 1))
            redis.call('ZADD', set, unpack(members))
            local tokens = {}
            for i = 1, n do
                table.insert(tokens, members[2 * i])
                table.insert(tokens, string.format('%d', first + i - 1))
            end
            redis.call('HSET', KEYS[4], unpack(tokens))
            keep(set, latest)
            keep(KEYS[4], latest)
            for _, v in ipairs(tokens) do
                table.insert(out, v)
            end
        end
        local since = '(' .. now
        local function none(key)
            return #redis.call('ZRANGEBYSCORE', key, since, '+inf', 'LIMIT', 0, 1) == 0
        end
        if none(KEYS[2]) then
            local writer = redis.call('ZRANGEBYSCORE', KEYS[3], since, '+inf', 'LIMIT', 0, 1)[1]
            if not writer then
                local readers = redis.call('ZRANGEBYSCORE', KEYS[7], since, '+inf')
                for i = 1, #readers, 256 do
                    admit(KEYS[7], KEYS[1], {unpack(readers, i, math.min(i + 255, #readers))})
                end
            elseif none(KEYS[1]) and redis.call('HGET', KEYS[8], writer) then
                admit(KEYS[3], KEYS[2], {writer})
            end
        end
    end
end
";

/// [`LEAVE`]'s notice, and its reply.
const LEAVE_ANNOUNCE: &str = r"
if announce then
    local notice = ARGV[4]
    for i = 2, #out, 2 do
        notice = notice .. ' ' .. out[i] .. '=' .. out[i + 1]
    end
    redis.call(ARGV[5], ARGV[3], notice)
end
return out
";

/// The group scripts with their prologue.
fn group(body: &str) -> Script {
    Script::new(&with_prologue(body))
}

fn with_prologue(body: &str) -> String {
    format!("{GROUP_PROLOGUE}{KEEP}{body}")
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
pub(crate) static LEAVE_TEXT: LazyLock<String> =
    LazyLock::new(|| compact(&format!("{KEEP}{LEAVE}{LEAVE_ADMIT}{LEAVE_ANNOUNCE}")));
/// [`LEAVE`] without its admitting step, for a release that admits
/// nobody: a permit's, or one of a client that nobody waits on by pub/sub
/// (Redlock's), which would skip it anyway. A cleanup's text is sent with
/// every call (to every master), and the server hashes it every time.
pub(crate) static LEAVE_UNADMITTING_TEXT: LazyLock<String> =
    LazyLock::new(|| compact(&format!("{LEAVE}{LEAVE_ANNOUNCE}")));

/// `text` without its indentation, blank lines and comment lines: what a
/// script sent as text costs is its bytes. The scripts have no long
/// strings or long comments (`[[ ]]`), whose lines this would change.
fn compact(text: &str) -> String {
    text.lines()
        .map(str::trim_start)
        .filter(|line| !line.is_empty() && !line.starts_with("--"))
        .fold(String::with_capacity(text.len()), |mut out, line| {
            out.push_str(line);
            out.push('\n');
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `compact` relies on: no long strings or long comments, no
    /// string continued across lines, and no line of code that starts
    /// with `--` once its indentation is gone.
    #[test]
    fn the_texts_sent_survive_compacting() {
        for text in [KEEP, LEAVE, LEAVE_ADMIT, LEAVE_ANNOUNCE] {
            for marker in ["[[", "[=", "\\\n"] {
                assert!(!text.contains(marker), "{marker:?} in {text}");
            }
        }
        for text in [&*LEAVE_TEXT, &*LEAVE_UNADMITTING_TEXT] {
            assert!(text.lines().all(|l| !l.starts_with("--") && !l.is_empty()));
            assert!(text.contains("return out"));
        }
        assert!(LEAVE_UNADMITTING_TEXT.len() * 2 < LEAVE_TEXT.len());
    }
}
