//! A fenced write to Redis: a Lua script compares the writer's fencing
//! token with the highest one stored beside the value, and refuses an older
//! one.
//!
//! ```text
//! DISTLOCK_URL=redis://localhost:6379 cargo run -p distlock --features redis --example fenced_redis
//! ```
//!
//! The locks live in the same Redis here, but the protected value can be
//! anywhere that compares before it writes. See `fenced_postgres` for why.

use std::time::Duration;

use distlock::backend::acquire_lease;
use distlock::{AcquireOptions, LockKind, Wait};
use redis::Script;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `KEYS[1]`: a hash with `value` and `fence`. `ARGV`: the token, the new
/// value. Writes only if no newer token has; returns 1 if written.
const FENCED_SET: &str = r"
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < fence then
    return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("DISTLOCK_URL").map_err(|_| "set DISTLOCK_URL to a redis:// URL")?;
    let (new_write, stale_write) = run(&url).await?;
    println!("the new holder's write: {new_write}; the stalled holder's write: {stale_write}");
    Ok(())
}

/// One value written by two holders of the same lock: the first stalls
/// past its lease, the second takes the lock and writes, then the first
/// wakes up and writes. Returns what happened to each write.
pub(crate) async fn run(url: &str) -> Result<(&'static str, &'static str), BoxError> {
    let mut redis = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let key = format!("fenced-example:{}", std::process::id());
    let lock = format!("value-{}", std::process::id());
    let (first, second) = (distlock::connect(url).await?, distlock::connect(url).await?);
    let ttl = first.capabilities().min_ttl.max(Duration::from_millis(500));
    // Not renewed: a process that stalls right after taking the lock.
    let stalled = acquire_lease(
        &first,
        &lock,
        LockKind::Exclusive,
        AcquireOptions::with_ttl(ttl).wait(Wait::No),
    )
    .await?;
    tokio::time::sleep(stalled.remaining() + Duration::from_millis(100)).await;

    let opts =
        AcquireOptions::with_ttl(Duration::from_secs(10)).wait(Wait::For(Duration::from_secs(10)));
    let new_write = second
        .with_defaults(opts)
        .with_lock(&lock, |held| {
            let (mut redis, key) = (redis.clone(), key.clone());
            async move { fenced_set(&mut redis, &key, "new", held.token().get()).await }
        })
        .await??;
    let stale_write = fenced_set(&mut redis, &key, "stale", stalled.token().get()).await?;
    let value: String = redis::cmd("HGET")
        .arg(&key)
        .arg("value")
        .query_async(&mut redis)
        .await?;
    assert_eq!(value, "new", "the stale write changed nothing");
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut redis)
        .await?;
    Ok((new_write, stale_write))
}

async fn fenced_set(
    redis: &mut redis::aio::MultiplexedConnection,
    key: &str,
    value: &str,
    token: u64,
) -> Result<&'static str, BoxError> {
    let written: i64 = Script::new(FENCED_SET)
        .key(key)
        .arg(token)
        .arg(value)
        .invoke_async(redis)
        .await?;
    Ok(if written == 1 {
        "accepted"
    } else {
        "refused: a newer holder has written"
    })
}
