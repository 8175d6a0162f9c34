//! The generic layer (Locker, LockGuard, renewal) against faults a real
//! backend cannot be made to show on demand: renewals that fail or hang.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Lease, LockBackend, WaitBudget, async_trait};
use lock_core::{
    AcquireOptions, Capabilities, Error, LockKind, LockState, Locker, MemoryBackend, Result, Wait,
};

/// How renewals misbehave.
const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const HANGING: u8 = 2;
const REFUSED: u8 = 3;
/// Not a renewal mode: acquires take a while to answer.
const SLOW_ACQUIRE: u8 = 4;

/// A memory backend whose renewals can be made to fail, hang or be refused,
/// and whose grants can reach the caller late.
#[derive(Debug, Clone, Default)]
struct Flaky {
    inner: MemoryBackend,
    renewals: Arc<AtomicU8>,
    /// How long a granted acquire's reply takes to come back, in ms.
    reply_delay_ms: Arc<AtomicU64>,
    /// The next release never answers.
    release_hangs_once: Arc<AtomicBool>,
    /// The TTL of every renewal that reached the store.
    renewed_with: Arc<Mutex<Vec<Duration>>>,
    /// How long a renewal's reply takes to come back, in ms.
    renew_delay_ms: Arc<AtomicU64>,
}

impl Flaky {
    fn set(&self, mode: u8) {
        self.renewals.store(mode, Ordering::SeqCst);
    }

    fn delay_replies(&self, ms: u64) {
        self.reply_delay_ms.store(ms, Ordering::SeqCst);
    }

    fn renewed_with(&self) -> Vec<Duration> {
        self.renewed_with.lock().unwrap().clone()
    }
}

#[async_trait]
impl LockBackend for Flaky {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        if self.renewals.load(Ordering::SeqCst) == SLOW_ACQUIRE {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let granted = self.inner.try_acquire(req).await;
        let delay = self.reply_delay_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        granted
    }
    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        lock_core::backend::poll_acquire(self, req, budget, lock_core::backend::Waking::polling())
            .await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        match self.renewals.load(Ordering::SeqCst) {
            FAILING => Err(Error::unavailable("flaky", "connection refused")),
            HANGING => std::future::pending().await,
            REFUSED => Err(Error::not_held(lease.name().to_string())),
            _ => {
                let renewed = self.inner.renew(lease, ttl).await;
                let delay = self.renew_delay_ms.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(delay)).await;
                self.renewed_with.lock().unwrap().push(ttl);
                renewed
            }
        }
    }
    async fn is_held(&self, lease: &Lease) -> Result<bool> {
        self.inner.is_held(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        if self.release_hangs_once.swap(false, Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.release(lease).await
    }
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.inner.abandon(req).await
    }
}

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::with_ttl(Duration::from_millis(ttl_ms)).wait(Wait::No)
}

#[tokio::test(start_paused = true)]
async fn renewal_keeps_a_lock_alive_past_many_ttls() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(guard.state(), LockState::Held);
    assert!(locker.try_lock("a").await.unwrap_err().is_busy());
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_go_at_risk_then_lost_at_the_deadline() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    let mut states = guard.handle().watch();
    backend.set(FAILING);
    assert_eq!(states.changed().await, Some(LockState::AtRisk));
    let at_risk_at = tokio::time::Instant::now();
    guard.lost().await;
    assert_eq!(guard.state(), LockState::Lost);
    assert!(tokio::time::Instant::now() >= guard.lease().deadline());
    assert!(
        at_risk_at < guard.lease().deadline(),
        "AtRisk came before the deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn recovery_from_at_risk_returns_to_held() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(600)).await.unwrap();
    let mut states = guard.handle().watch();
    backend.set(FAILING);
    assert_eq!(states.changed().await, Some(LockState::AtRisk));
    backend.set(HEALTHY);
    assert_eq!(states.changed().await, Some(LockState::Held));
    assert_eq!(states.state(), LockState::Held);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_hanging_renewal_cannot_outlive_the_deadline() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    backend.set(HANGING);
    guard.lost().await;
    assert!(tokio::time::Instant::now() >= guard.lease().deadline());
}

/// A grant whose reply arrives late has less of its lease left. The lost
/// signal must follow the lease (counted from when the request was sent),
/// not the moment the guard was built.
#[tokio::test(start_paused = true)]
async fn a_late_grant_is_lost_at_its_own_deadline() {
    let backend = Flaky::default();
    backend.delay_replies(240);
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    backend.set(HANGING);
    let deadline = guard.lease().deadline();
    assert!(deadline > tokio::time::Instant::now(), "granted in time");
    tokio::time::sleep_until(deadline + Duration::from_millis(1)).await;
    assert_eq!(
        guard.state(),
        LockState::Lost,
        "still Held after the lease's deadline"
    );
    assert!(guard.handle().is_lost());
}

/// A section that keeps the runtime busy past the lease's deadline still
/// sees the lock as lost, although the keep-alive task never ran to say so.
#[tokio::test]
async fn a_blocked_runtime_still_sees_the_lease_run_out() {
    let locker = Locker::new(MemoryBackend::new());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    let handle = guard.handle();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(guard.state(), LockState::Lost);
    assert!(handle.is_lost(), "is_lost after the deadline");
    drop(guard);
}

/// A late grant is renewed as soon as its first renewal is due, a third of
/// the TTL after the request was sent, even if that is when the guard is
/// built.
#[tokio::test(start_paused = true)]
async fn a_late_grant_is_renewed_on_the_lease_schedule() {
    let backend = Flaky::default();
    backend.delay_replies(240);
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    let first_deadline = guard.lease().deadline();
    tokio::time::sleep_until(first_deadline).await;
    assert_eq!(guard.state(), LockState::Held);
    assert!(
        guard.lease().deadline() > first_deadline,
        "renewed before its deadline"
    );
    guard.release().await.unwrap();
}

/// A grant that arrives after its whole lease ran out is lost from the start.
#[tokio::test(start_paused = true)]
async fn a_grant_arriving_after_its_lease_is_lost_at_once() {
    let backend = Flaky::default();
    backend.delay_replies(400);
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    assert_eq!(guard.state(), LockState::Lost);
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
}

#[tokio::test(start_paused = true)]
async fn with_lock_cancels_the_section_when_the_lock_is_lost() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone()).with_defaults(opts(300));
    backend.set(REFUSED);
    let finished = Arc::new(AtomicU8::new(0));
    let flag = finished.clone();
    let outcome = locker
        .with_lock("a", |held| async move {
            assert!(held.token().get() > 0);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            flag.store(1, Ordering::SeqCst);
        })
        .await;
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the section was cut short"
    );
}

#[tokio::test(start_paused = true)]
async fn with_lock_returns_the_section_result_and_releases() {
    let locker = Locker::new(MemoryBackend::new());
    let out = locker.with_lock("a", |_| async { 42 }).await.unwrap();
    assert_eq!(out, 42);
    assert!(locker.try_lock("a").await.is_ok());
}

#[tokio::test]
async fn dropping_a_guard_releases_in_the_background() {
    let locker = Locker::new(MemoryBackend::new());
    drop(locker.lock("a").await.unwrap());
    let again = locker.lock_with(
        "a",
        AcquireOptions::default().wait(Wait::For(Duration::from_secs(5))),
    );
    again.await.unwrap().release().await.unwrap();
}

#[test]
fn dropping_a_guard_without_a_runtime_does_not_block_or_panic() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let guard = rt
        .block_on(Locker::new(MemoryBackend::new()).lock("a"))
        .unwrap();
    drop(rt);
    drop(guard);
}

/// The caller drops an acquire while its request is in flight: the request
/// still finishes, and what it was granted is released, not left held by
/// nobody for its (long) TTL.
#[tokio::test]
async fn an_acquire_dropped_mid_request_leaves_nothing_held() {
    let backend = Flaky::default();
    backend.set(SLOW_ACQUIRE);
    let locker = Locker::new(backend.clone());
    let mut acquire = Box::pin(lock_core::backend::acquire_lease(
        &locker,
        "a",
        LockKind::Exclusive,
        opts(60_000),
    ));
    std::future::poll_fn(|cx| {
        assert!(
            acquire.as_mut().poll(cx).is_pending(),
            "the request is in flight"
        );
        Poll::Ready(())
    })
    .await;
    drop(acquire);
    // Let the request that was in flight finish and be given back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    backend.set(HEALTHY);
    let free = locker.lock_with(
        "a",
        AcquireOptions::default().wait(Wait::For(Duration::from_secs(5))),
    );
    free.await
        .expect("the grant of the dropped acquire was released")
        .release()
        .await
        .unwrap();
}

/// A release cut before the backend answered is sent again in the
/// background: the lock is not left held by nobody until its TTL.
#[tokio::test(start_paused = true)]
async fn a_release_cut_short_still_releases() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(60_000)).await.unwrap();
    backend.release_hangs_once.store(true, Ordering::SeqCst);
    let cut = tokio::time::timeout(Duration::from_millis(10), guard.release()).await;
    assert!(cut.is_err(), "the release was cut short");
    let again = locker.lock_with(
        "a",
        AcquireOptions::default().wait(Wait::For(Duration::from_secs(5))),
    );
    again
        .await
        .expect("released in the background, long before the TTL")
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn release_of_a_lost_lock_reports_lost() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    backend.set(HANGING);
    guard.lost().await;
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
    assert!(
        locker.try_lock("a").await.is_ok(),
        "released on the backend all the same"
    );
}

/// Renewals start from a queue ordered by when each is first due: a short
/// lease taken after a long one must not wait for the long one's turn, and
/// guards outlive the locker that handed them out.
#[tokio::test(start_paused = true)]
async fn a_short_lease_after_a_long_one_is_renewed_on_its_own_schedule() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let long = locker.lock_with("long", opts(60_000)).await.unwrap();
    // Let the renewal queue's task go to sleep until the long lease is due.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let short = locker.lock_with("short", opts(300)).await.unwrap();
    drop(locker);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(short.state(), LockState::Held);
    let other = Locker::new(backend.clone());
    assert!(
        other.try_lock("short").await.unwrap_err().is_busy(),
        "the short lease ran out: it was not renewed"
    );
    short.release().await.unwrap();
    long.release().await.unwrap();
}

/// Once released guards have emptied the queue, its task looks again one
/// parking delay later instead of sleeping until woken; a shorter lease
/// parked before then must still be renewed on its own schedule.
#[tokio::test(start_paused = true)]
async fn a_short_lease_after_long_ones_were_released_is_renewed() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    for _ in 0..3 {
        let long = locker.lock_with("long", opts(60_000)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        long.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let short = locker.lock_with("short", opts(300)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(short.state(), LockState::Held);
    assert!(
        locker.try_lock("short").await.unwrap_err().is_busy(),
        "the short lease ran out: it was not renewed"
    );
    short.release().await.unwrap();
}

/// The task that starts renewals dies with its runtime; a locker used again
/// on another runtime must start a new one rather than leave its next
/// guards unrenewed.
#[test]
fn renewals_start_again_on_a_new_runtime() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let first = paused();
    first.block_on(async {
        let guard = locker.lock_with("a", opts(300)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(guard.state(), LockState::Held);
        guard.release().await.unwrap();
    });
    drop(first);
    paused().block_on(async {
        let guard = locker.lock_with("b", opts(300)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            locker.try_lock("b").await.unwrap_err().is_busy(),
            "the lease ran out: nothing renewed it"
        );
        guard.release().await.unwrap();
    });
}

/// The task that just released a lock and asks for it again at once queues
/// behind the task of the same locker that was already waiting, instead of
/// taking the lock again before the waiter's wake-up runs.
#[tokio::test(flavor = "current_thread")]
async fn a_releaser_asking_again_does_not_overtake_a_waiter() {
    let locker = Locker::new(MemoryBackend::new());
    let opts = AcquireOptions::with_ttl(Duration::from_secs(30)).wait(Wait::Forever);
    let mut held = locker.lock_with("busy", opts).await.expect("free");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let waiter = {
        let (locker, tx) = (locker.clone(), tx.clone());
        tokio::spawn(async move {
            for _ in 0..3 {
                let guard = locker.lock_with("busy", opts).await.expect("granted");
                tx.send("waiter").unwrap();
                guard.release().await.expect("release");
            }
        })
    };
    // The waiter tried once and now waits.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for _ in 0..3 {
        held.release().await.expect("release");
        held = locker.lock_with("busy", opts).await.expect("granted");
        tx.send("releaser").unwrap();
    }
    held.release().await.expect("release");
    waiter.await.expect("waiter task");
    drop(tx);
    let mut order = Vec::new();
    while let Some(who) = rx.recv().await {
        order.push(who);
    }
    assert_eq!(
        order,
        [
            "waiter", "releaser", "waiter", "releaser", "waiter", "releaser"
        ]
    );
}

/// A memory backend that counts attempts and waits by plain polling.
#[derive(Debug, Clone, Default)]
struct Counted {
    inner: MemoryBackend,
    attempts: Arc<AtomicU64>,
}

#[async_trait]
impl LockBackend for Counted {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_serial_writes(true)
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(req).await
    }
    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        lock_core::backend::poll_acquire(self, req, budget, lock_core::backend::Waking::polling())
            .await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.renew(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.inner.release(lease).await
    }
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.inner.abandon(req).await
    }
}

/// On a store that writes serially, while a guard of the same locker holds
/// the name, a waiter's attempt can only fail and would hold up the
/// holder's release: the waiter makes its first attempt once that guard
/// lets go.
#[tokio::test(flavor = "current_thread")]
async fn a_waiter_tries_once_its_lockers_own_holder_lets_go() {
    let backend = Counted::default();
    let locker = Locker::new(backend.clone());
    let ttl = Duration::from_secs(30);
    let held = locker
        .lock_with("local", AcquireOptions::with_ttl(ttl).wait(Wait::No))
        .await
        .expect("free");
    let before = backend.attempts.load(Ordering::SeqCst);
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let opts = AcquireOptions::with_ttl(ttl).wait(Wait::For(Duration::from_secs(10)));
            locker.lock_with("local", opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        backend.attempts.load(Ordering::SeqCst),
        before,
        "no attempt while the locker's own guard holds the name"
    );
    held.release().await.expect("release");
    let granted = waiter.await.expect("task").expect("granted");
    assert_eq!(backend.attempts.load(Ordering::SeqCst), before + 1);
    granted.release().await.expect("release");
}

/// A backend whose requests reach the server in order, and whose releases
/// take until `let_release` is told.
#[derive(Debug, Clone, Default)]
struct Ordered {
    counted: Counted,
    let_release: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl LockBackend for Ordered {
    fn capabilities(&self) -> Capabilities {
        self.counted
            .inner
            .capabilities()
            .with_ordered_requests(true)
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        self.counted.try_acquire(req).await
    }
    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        self.counted.acquire(req, budget).await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.counted.renew(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        // The request is on its way once polled; the reply comes later.
        self.let_release.notified().await;
        self.counted.release(lease).await
    }
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.counted.abandon(req).await
    }
}

/// Where requests are ordered, the locker's next waiter tries as soon as
/// its holder's release is on its way, before the release's reply — not
/// after the 100 ms a waiter otherwise gives a local holder. The clock is
/// paused, so only idle time moves it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn with_ordered_requests_a_waiter_tries_right_behind_the_release() {
    let backend = Ordered::default();
    let locker = Locker::new(backend.clone());
    let ttl = Duration::from_secs(30);
    let held = locker
        .lock_with("ordered", AcquireOptions::with_ttl(ttl).wait(Wait::No))
        .await
        .expect("free");
    let before = backend.counted.attempts.load(Ordering::SeqCst);
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let opts = AcquireOptions::with_ttl(ttl).wait(Wait::For(Duration::from_secs(10)));
            locker.lock_with("ordered", opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(backend.counted.attempts.load(Ordering::SeqCst), before);
    let release = tokio::spawn(held.release());
    tokio::time::timeout(Duration::from_millis(50), async {
        while backend.counted.attempts.load(Ordering::SeqCst) == before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the waiter tries while the release waits for its reply");
    assert!(!release.is_finished());
    backend.let_release.notify_one();
    release.await.expect("task").expect("release");
    let granted = waiter.await.expect("task").expect("granted");
    backend.let_release.notify_one();
    granted.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn extend_renews_at_once_and_the_renewals_after_it_use_its_ttl() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    let lease = guard.extend(Duration::from_secs(30)).await.unwrap();
    assert_eq!(lease.ttl(), Duration::from_secs(30));
    assert_eq!(guard.lease().ttl(), Duration::from_secs(30));
    assert_eq!(lease.token(), guard.token());
    assert_eq!(backend.renewed_with(), [Duration::from_secs(30)]);
    // The 300 ms lease's schedule (a renewal every 100 ms) is gone.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(backend.renewed_with(), [Duration::from_secs(30)]);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(backend.renewed_with(), [Duration::from_secs(30); 2]);
    assert_eq!(guard.state(), LockState::Held);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn extend_to_a_shorter_ttl_moves_a_running_keep_alive_onto_it() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(30_000)).await.unwrap();
    // The keep-alive has started and sleeps until its next renewal, at 20 s.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(backend.renewed_with(), [Duration::from_secs(30)]);
    guard.extend(Duration::from_millis(300)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(guard.state(), LockState::Held);
    let short = backend
        .renewed_with()
        .iter()
        .filter(|t| **t == Duration::from_millis(300))
        .count();
    assert!(short >= 10, "{short} renewals of the short lease in 2 s");
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn extend_refused_by_the_backend_loses_the_lock() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(3_000)).await.unwrap();
    let zero = guard.extend(Duration::ZERO).await;
    assert!(matches!(zero, Err(Error::InvalidTtl { .. })), "{zero:?}");
    assert_eq!(guard.state(), LockState::Held);
    backend.set(REFUSED);
    let refused = guard.extend(Duration::from_secs(10)).await;
    assert!(matches!(refused, Err(Error::NotHeld { .. })), "{refused:?}");
    assert_eq!(guard.state(), LockState::Lost);
    tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("the lost signal fired");
    let again = guard.extend(Duration::from_secs(10)).await;
    assert!(matches!(again, Err(Error::Lost { .. })), "{again:?}");
}

#[tokio::test(start_paused = true)]
async fn is_held_asks_the_backend_and_a_no_loses_the_lock() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(3_000)).await.unwrap();
    assert!(guard.is_held().await.unwrap());
    // Freed behind the guard's back, as an operator deleting the key would.
    backend.inner.release(&guard.lease()).await.unwrap();
    assert_eq!(guard.state(), LockState::Held, "nothing local knows yet");
    assert!(!guard.is_held().await.unwrap());
    assert_eq!(guard.state(), LockState::Lost);
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_task_waiting_for_a_name_it_holds_fails_at_once() {
    let locker = Locker::new(MemoryBackend::new());
    let guard = locker.lock("a").await.unwrap();
    let started = tokio::time::Instant::now();
    let again = locker
        .lock_with("a", opts(3_000).wait(Wait::For(Duration::from_secs(10))))
        .await;
    assert!(matches!(again, Err(Error::AlreadyHeld { .. })), "{again:?}");
    let again = locker.clone().lock("a").await;
    assert!(matches!(again, Err(Error::AlreadyHeld { .. })), "{again:?}");
    let in_section = locker.with_lock("a", |_| async {}).await;
    assert!(matches!(in_section, Err(Error::AlreadyHeld { .. })));
    assert_eq!(started.elapsed(), Duration::ZERO);
    // Not waiting, the answer is the usual one.
    assert!(locker.try_lock("a").await.unwrap_err().is_busy());
    // Another name is fine.
    locker.lock("b").await.unwrap().release().await.unwrap();

    // Another task of the same locker waits its turn.
    let other = locker.clone();
    let waiter = tokio::spawn(async move {
        let guard = other.lock("a").await?;
        // That task holds it now, and gets the error itself.
        let again = other.lock("a").await;
        assert!(matches!(again, Err(Error::AlreadyHeld { .. })), "{again:?}");
        guard.release().await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "the other task waits for the holder");
    guard.release().await.unwrap();
    waiter.await.unwrap().unwrap();
    // Released, the name may be taken again by the task that held it.
    locker.lock("a").await.unwrap().release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_task_that_would_wait_on_its_own_read_or_write_fails_at_once() {
    let locker = Locker::new(MemoryBackend::new());
    let started = tokio::time::Instant::now();
    let read = locker.rwlock("doc").read().await.unwrap();
    let write = locker.rwlock("doc").write().await;
    assert!(matches!(write, Err(Error::AlreadyHeld { .. })), "{write:?}");
    // A second read, a permit and the mutex of the name are other matters.
    let second = locker.rwlock("doc").read().await.unwrap();
    let permit = locker.semaphore("doc", 1).acquire().await.unwrap();
    let mutex = locker.lock("doc").await.unwrap();
    for guard in [read, second, permit, mutex] {
        guard.release().await.unwrap();
    }
    let write = locker.rwlock("doc").write().await.unwrap();
    for kind in [LockKind::Read, LockKind::Write] {
        let wait = opts(3_000).wait(Wait::For(Duration::from_secs(10)));
        let doc = locker.rwlock("doc");
        let again = match kind {
            LockKind::Read => doc.read_with(wait).await,
            _ => doc.write_with(wait).await,
        };
        assert!(
            matches!(again, Err(Error::AlreadyHeld { .. })),
            "{kind}: {again:?}"
        );
    }
    assert_eq!(started.elapsed(), Duration::ZERO);
    write.release().await.unwrap();
    locker
        .rwlock("doc")
        .read()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn extend_to_a_shorter_ttl_moves_the_deadline_before_the_answer() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(30_000)).await.unwrap();
    let handle = guard.handle();
    // The server may apply the shorter TTL although its answer never comes.
    backend.set(HANGING);
    let extending = tokio::spawn(async move {
        let outcome = guard.extend(Duration::from_secs(1)).await;
        (outcome, guard)
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        handle.lease().remaining() <= Duration::from_secs(1),
        "the local deadline already follows the shorter TTL: {:?}",
        handle.lease().remaining()
    );
    tokio::time::timeout(Duration::from_secs(2), handle.lost())
        .await
        .expect("lost at the shorter deadline");
    extending.abort();
}

#[tokio::test(start_paused = true)]
async fn extend_answered_after_the_lease_ran_out_reports_it_lost() {
    let backend = Flaky::default();
    let locker = Locker::new(backend.clone());
    let guard = locker.lock_with("a", opts(300)).await.unwrap();
    // The renewal is applied, but its answer comes after the lease ran out
    // and the lost signal fired: nothing renews the lock any more.
    backend.renew_delay_ms.store(1_000, Ordering::SeqCst);
    let extended = guard.extend(Duration::from_secs(10)).await;
    assert!(matches!(extended, Err(Error::Lost { .. })), "{extended:?}");
    assert_eq!(guard.state(), LockState::Lost);
}

/// An extend whose reply comes after the lease's deadline, while nothing
/// else ran (a blocked runtime), does not bring a lock that was already
/// `Lost` by the deadline rule back to `Held`.
#[test]
fn an_extend_answered_after_the_deadline_does_not_revive_the_lock() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let backend = Flaky::default();
        backend.renew_delay_ms.store(50, Ordering::SeqCst);
        let locker = Locker::new(backend.clone());
        let guard = locker.lock_with("a", opts(300)).await.unwrap();
        let mut extend = Box::pin(guard.extend(Duration::from_secs(10)));
        std::future::poll_fn(|cx| {
            assert!(extend.as_mut().poll(cx).is_pending(), "the request is out");
            Poll::Ready(())
        })
        .await;
        // The runtime is blocked past the deadline: no keep-alive runs.
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(guard.state(), LockState::Lost, "lost by the deadline");
        let outcome = extend.await;
        assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
        assert_eq!(guard.state(), LockState::Lost, "and still lost");
    });
}

/// A multi-lock's section gets every name's handle, in the order taken,
/// and is cut off with `Lost` naming the name that was lost.
#[tokio::test]
async fn a_multi_lock_section_sees_every_name_and_ends_when_one_is_lost() {
    let locker = Locker::new(MemoryBackend::new());
    let names = locker
        .multi_lock(["b", "a"])
        .with_lock(|held| async move {
            held.iter()
                .map(|h| h.name().to_string())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
    assert_eq!(names, ["a", "b"]);
    locker
        .try_lock("a")
        .await
        .expect("released after the section")
        .release()
        .await
        .unwrap();

    let short = locker
        .clone()
        .with_defaults(AcquireOptions::with_ttl(Duration::from_millis(300)));
    let backend = locker.backend().clone();
    let outcome = short
        .multi_lock(["a", "b"])
        .with_lock(|held| async move {
            backend.release(&held[1].lease()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
        })
        .await;
    match outcome {
        Err(Error::Lost { name, .. }) => assert_eq!(name, "b"),
        other => panic!("a section whose lock was lost: {other:?}"),
    }
}
