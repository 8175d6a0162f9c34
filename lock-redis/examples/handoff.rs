//! How long a hand-off takes on one Redis, in the server's own round trips.
//!
//! ```sh
//! cargo run --release -p lock-redis --example handoff -- redis://127.0.0.1:6379 [ROUNDS]
//! ```
//!
//! Prints the median of three things, taken in interleaved rounds on one
//! backend: a bare `SET NX PX` sent back to back (a *busy* command), the same
//! command sent after the caller slept as long as a holder in `distlock
//! bench` holds the lock (an *idle-start* command: on a virtual machine the
//! cores sleep meanwhile and take long to wake), and a hand-off — a holder
//! sleeps, calls release, and a waiter woken by the pub/sub notice holds the
//! lock. A hand-off starts like the idle-start command (the release) and adds
//! the notice and the waiter's acquire.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{AcquireOptions, Locker, Wait};
use lock_redis::RedisBackend;

/// As long as `distlock bench` holds the lock in its hand-off workload.
const HOLD: Duration = Duration::from_millis(2);

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let rounds: usize = args.next().map_or(Ok(10), |r| r.parse())?;
    let raw = redis::Client::open(url.as_str())?
        .get_connection_manager()
        .await?;
    let locker = Locker::new(RedisBackend::connect(&url).await?);
    let opts = AcquireOptions::with_ttl(Duration::from_secs(30));
    let set_nx = |key: String| {
        let mut conn = raw.clone();
        async move {
            let start = Instant::now();
            let _: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg("x")
                .arg("NX")
                .arg("PX")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            Ok::<_, redis::RedisError>(start.elapsed())
        }
    };
    let (mut busy, mut idle, mut hand_offs) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        for i in 0..100 {
            busy.push(set_nx(format!("handoff-example:busy:{round}:{i}")).await?);
        }
        for i in 0..100 {
            tokio::time::sleep(HOLD).await;
            idle.push(set_nx(format!("handoff-example:idle:{round}:{i}")).await?);
        }
        for _ in 0..100 {
            let held = locker.lock_with("handoff-example", opts).await?;
            let released_at = Arc::new(Mutex::new(Instant::now()));
            let waiter = {
                let (locker, released_at) = (locker.clone(), released_at.clone());
                tokio::spawn(async move {
                    let wait = opts.wait(Wait::For(Duration::from_secs(5)));
                    let guard = locker.lock_with("handoff-example", wait).await?;
                    let took = released_at.lock().map_or(Duration::ZERO, |at| at.elapsed());
                    guard.release().await?;
                    Ok::<_, lock_core::Error>(took)
                })
            };
            // Long enough for the waiter to have tried and be waiting.
            tokio::time::sleep(HOLD).await;
            *released_at.lock().map_err(|_| "poisoned")? = Instant::now();
            held.release().await?;
            hand_offs.push(waiter.await??);
        }
    }
    let (busy, idle, hand_off) = (median(&mut busy), median(&mut idle), median(&mut hand_offs));
    let ratio = |d: Duration, of: Duration| d.as_secs_f64() / of.as_secs_f64();
    println!("busy SET NX PX p50        {busy:>10.1?}");
    println!("idle-start SET NX PX p50  {idle:>10.1?}");
    println!(
        "hand-off p50              {hand_off:>10.1?}  = {:.2}× a busy command, {:.2}× an idle-start one",
        ratio(hand_off, busy),
        ratio(hand_off, idle)
    );
    Ok(())
}
