//! memcached's clock against the leases counted on ours. Its clock is a
//! count of whole seconds moved by a timer that runs a little over once a
//! second, so now and then one tick moves it by two, and an item stored
//! just before that tick lives as little as two seconds less than its TTL.
//! Here the tick is provoked: the server is stopped (SIGSTOP) so that its
//! ticks fall late in the second, then stopped again across the next tick
//! until the second after has begun. A guard granted or extended just
//! before must be `Lost` by the time its item is gone.

mod common {
    pub(crate) mod memcache;
}

use std::time::Duration;

use common::memcache::backend;
use conformance_tests::proxy::{Fault, Proxy};
use conformance_tests::servers::memcached::Memcached;
use conformance_tests::targets::fresh_table;
use distlock::backends::memcache::{MIN_TTL, MemcacheBackend};
use lock_core::{AcquireOptions, LockGuard, LockName, LockState, Locker, Wait};
use nix::time::{ClockId, clock_gettime};
use tokio::time::{Instant, sleep, sleep_until};

/// Where in the second the ticks are put by the first stop: late, so that
/// a tick delayed by a fraction of a second crosses a whole second more.
const PHASE: Duration = Duration::from_millis(750);
/// When, after the whole second the phased tick read, the grant or renewal
/// is sent: the clock still reads that second, 1.45 s behind.
const WRITE_AT: Duration = Duration::from_millis(1_450);
/// The latest the second stop may begin, well before the tick due at 1.75.
const STOP_BY: Duration = Duration::from_millis(1_600);
/// When the server resumes: just past the second after, so the late tick
/// reads a clock two seconds on.
const RESUME_AT: Duration = Duration::from_millis(2_100);
/// Attempts at a short-lived item before the test gives up on provoking one.
const ATTEMPTS: usize = 5;

/// The clock memcached reads (`CLOCK_MONOTONIC`, which tokio's `Instant`
/// reads too).
fn monotonic() -> Duration {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock_gettime");
    Duration::new(
        u64::try_from(now.tv_sec()).expect("seconds"),
        u32::try_from(now.tv_nsec()).expect("nanoseconds"),
    )
}

/// The first instant from `not_before` on that lies `fraction` past a whole
/// second of the monotonic clock.
fn at_fraction(not_before: Instant, fraction: Duration) -> Instant {
    let (now, mono) = (Instant::now(), monotonic());
    let earliest = mono + not_before.saturating_duration_since(now);
    let mut target = Duration::from_secs(earliest.as_secs()) + fraction;
    if target < earliest {
        target += Duration::from_secs(1);
    }
    now + (target - mono)
}

/// One test's memcached, its locker (through a proxy that can cut the
/// guard's renewals off) and a direct view of the items.
struct Setup {
    server: Memcached,
    proxy: Proxy,
    locker: Locker,
    direct: std::sync::Arc<MemcacheBackend>,
}

impl Setup {
    async fn start() -> Self {
        let server = Memcached::start().await;
        let proxy = Proxy::to(server.socket_addr()).await;
        let query = format!("prefix={}:&timeout=500ms", fresh_table());
        let locker = Locker::from_arc(backend(&server.url_via(proxy.port(), &query)).await);
        let direct = backend(&server.url(&query)).await;
        Self {
            server,
            proxy,
            locker,
            direct,
        }
    }

    /// Stops the server across a tick and resumes it [`PHASE`] past a whole
    /// second: the overdue tick runs at once and reads that second, and the
    /// next ones follow a second (and a little) apart. That second, as an
    /// instant.
    async fn phase_ticks(&self) -> Instant {
        let stopped = Instant::now();
        self.server.process().pause();
        let resume = at_fraction(stopped + Duration::from_millis(1_100), PHASE);
        sleep_until(resume).await;
        self.server.process().resume();
        resume - PHASE
    }

    /// Runs `write` (given the second the clock reads, it sends a grant or
    /// an `extend` at [`WRITE_AT`] past it), lets memcached's clock move by
    /// two, and cuts the guard's later renewals off. `None` if this machine
    /// was too slow to keep the timing (then nothing was provoked; the
    /// caller tries again).
    async fn just_before_a_jump<F>(&self, write: F) -> Option<LockGuard>
    where
        F: AsyncFnOnce(Instant) -> LockGuard,
    {
        let second = self.phase_ticks().await;
        let guard = write(second).await;
        // No renewal may set a fresh expiry on the jumped clock.
        self.proxy.set(Fault::Stall);
        if Instant::now() > second + STOP_BY {
            return None;
        }
        self.server.process().pause();
        sleep_until(second + RESUME_AT).await;
        self.server.process().resume();
        Some(guard)
    }

    /// Watches `guard`'s item until it is gone and asserts the guard said
    /// `Lost` by then. The item's lifetime, counted from the send of the
    /// request that last set its expiry.
    async fn lost_before_its_item(&self, guard: &LockGuard, what: &str) -> Duration {
        let lease = guard.lease();
        let key = self
            .direct
            .lock_key(&LockName::new(guard.name()).expect("name"));
        let give_up = lease.sent_at() + lease.ttl() + Duration::from_secs(2);
        loop {
            let item = self.direct.client().get(&key).await.expect("get");
            let now = Instant::now();
            if item.is_none() {
                let lived = now - lease.sent_at();
                assert_eq!(
                    guard.state(),
                    LockState::Lost,
                    "{what}: the item of TTL {:?} is gone {lived:?} after the lease's send \
                     (`sent_at`), and the guard still holds the lock (its deadline is {:?} \
                     after that send)",
                    lease.ttl(),
                    lease.deadline() - lease.sent_at(),
                );
                return lived;
            }
            assert!(now < give_up, "{what}: the item outlived its TTL: {item:?}");
            sleep(Duration::from_millis(5)).await;
        }
    }

    /// Runs `attempt` until one provokes an item that lives less than its
    /// TTL minus a second (what a lease a second short of its TTL would
    /// outlast), each checked by [`lost_before_its_item`].
    async fn provoke<F>(&self, what: &str, attempt: F)
    where
        F: AsyncFn(&str) -> Option<LockGuard>,
    {
        let mut lifetimes = Vec::new();
        for i in 0..ATTEMPTS {
            let name = format!("jump-{i}");
            let Some(guard) = attempt(&name).await else {
                self.proxy.set(Fault::None);
                lifetimes.push(None);
                continue;
            };
            let lived = self.lost_before_its_item(&guard, what).await;
            self.proxy.set(Fault::None);
            let _ = guard.release().await;
            eprintln!("{what}: an item of TTL {MIN_TTL:?} lived {lived:?}");
            if lived < MIN_TTL - Duration::from_secs(1) {
                return;
            }
            lifetimes.push(Some(lived));
        }
        panic!(
            "{what}: no attempt provoked a tick that moves memcached's clock by two \
             (item lifetimes, None where the timing was missed): {lifetimes:?}"
        );
    }
}

fn opts() -> AcquireOptions {
    AcquireOptions::with_ttl(MIN_TTL).wait(Wait::No)
}

/// A grant sent while memcached's clock is 1.45 s behind, just before a
/// tick that moves it by two: its item lives about `TTL − 1.35 s`, and the
/// guard must be `Lost` before then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_granted_before_a_two_second_tick_is_lost_before_its_item() {
    let setup = Setup::start().await;
    setup
        .provoke("a grant", async |name| {
            setup
                .just_before_a_jump(async |second| {
                    sleep_until(second + WRITE_AT).await;
                    setup.locker.lock_with(name, opts()).await.expect("free")
                })
                .await
        })
        .await;
}

/// The same for a renewal: a guard granted early in the second (its lease
/// alone would end in time) and extended while the clock is 1.45 s behind,
/// just before the tick that moves it by two. The renewal sets its expiry
/// on the same lagging clock, so its lease must end as early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_extended_before_a_two_second_tick_is_lost_before_its_item() {
    let setup = Setup::start().await;
    setup
        .provoke("an extend", async |name| {
            setup
                .just_before_a_jump(async |second| {
                    let guard = setup.locker.lock_with(name, opts()).await.expect("free");
                    sleep_until(second + WRITE_AT).await;
                    guard.extend(MIN_TTL).await.expect("extend");
                    guard
                })
                .await
        })
        .await;
}
