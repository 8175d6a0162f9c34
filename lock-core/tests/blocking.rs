//! The blocking API over the in-memory backend: every call finished before
//! it returns, guards released on drop on any thread, reentrancy by thread.

use std::time::Duration;

use lock_core::backend::{AcquireRequest, Lease, LockBackend, async_trait};
use lock_core::blocking::Locker;
use lock_core::{AcquireOptions, Error, LockState, MemoryBackend, Wait};

fn locker() -> Locker {
    Locker::new(MemoryBackend::new()).expect("a runtime")
}

#[test]
fn a_dropped_guard_is_released_before_drop_returns() {
    let locker = locker();
    let guard = locker.lock("a").expect("free");
    assert!(locker.try_lock("a").unwrap_err().is_busy());
    drop(guard);
    locker
        .try_lock("a")
        .expect("released by the drop")
        .release()
        .expect("release");
}

#[test]
fn a_guard_dropped_on_another_thread_is_released() {
    let locker = locker();
    let guard = locker.lock("a").expect("free");
    let token = guard.token();
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("thread");
    let again = locker.try_lock("a").expect("released by the other thread");
    assert!(again.token() > token);
}

#[test]
fn a_guard_dropped_inside_an_async_runtime_is_released_in_the_background() {
    let locker = locker();
    let guard = locker.lock("a").expect("free");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move { drop(guard) });
    taken_within_10s(&locker, "a", "never released");
}

#[test]
fn the_holding_thread_gets_already_held_or_a_reentrant_hold() {
    let locker = locker();
    let first = locker.lock("a").expect("free");
    match locker.lock("a") {
        Err(Error::AlreadyHeld { .. }) => {}
        other => panic!("a second lock on the holding thread: {other:?}"),
    }
    let reentrant = AcquireOptions::default().reentrant(true);
    let second = locker.lock_with("a", reentrant).expect("reentrant");
    assert_eq!(second.token(), first.token());
    assert_eq!(first.holds(), 2);
    // Another thread is another holder, and waits.
    let other = locker.clone();
    let busy = std::thread::spawn(move || other.lock_with("a", reentrant.wait(Wait::No)))
        .join()
        .expect("thread");
    assert!(busy.unwrap_err().is_busy());
    first.release().expect("first release");
    assert!(locker.as_async().capabilities().backend == "memory");
    drop(second);
    locker
        .try_lock("a")
        .expect("free after both")
        .release()
        .expect("release");
}

#[test]
fn leases_are_renewed_while_the_caller_blocks_elsewhere() {
    let locker = locker();
    let opts = AcquireOptions::with_ttl(Duration::from_secs(1));
    let guard = locker.lock_with("a", opts).expect("free");
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(guard.state(), LockState::Held, "renewed in the background");
    assert!(guard.is_held().expect("is_held"));
    guard.release().expect("release");
}

#[test]
fn the_handles_block_too() {
    let locker = locker();
    let pool = locker.semaphore("pool", 2);
    let (a, b) = (pool.acquire().expect("1"), pool.acquire().expect("2"));
    assert!(pool.try_acquire().unwrap_err().is_busy());
    drop(a);
    pool.try_acquire()
        .expect("a permit back")
        .release()
        .expect("release");
    b.release().expect("release");

    let doc = locker.rwlock("doc");
    let read = doc.read().expect("read");
    assert!(doc.try_write().unwrap_err().is_busy());
    read.release().expect("release");
    let written = doc.with_write(|held| held.token()).expect("write");
    assert!(written.get() > 0);

    let both = locker.multi_lock(["y", "x"]);
    let held = both.lock().expect("both");
    assert_eq!(held.tokens().len(), 2);
    assert!(locker.try_lock("x").unwrap_err().is_busy());
    drop(held);
    let names = both
        .with_lock(|handles| {
            handles
                .iter()
                .map(|h| h.name().to_string())
                .collect::<Vec<_>>()
        })
        .expect("both again");
    assert_eq!(names, ["x", "y"]);
}

#[test]
fn with_lock_reports_a_lock_lost_while_the_section_ran() {
    let locker = locker();
    let opts = AcquireOptions::with_ttl(Duration::from_millis(200));
    let locker =
        Locker::from_async(|| async move { Ok(locker.as_async().clone().with_defaults(opts)) })
            .expect("runtime");
    let outcome = locker.with_lock("a", |held| {
        // Taken away behind the guard's back, as an expiry would.
        let lease = held.lease();
        let backend = locker.as_async().backend().clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(backend.release(&lease)).expect("release");
        std::thread::sleep(Duration::from_millis(400));
    });
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
}

/// A guard that outlives its locker and is dropped on a runtime's thread is
/// still released: the release keeps the blocking runtime alive until done.
#[test]
fn the_last_guard_dropped_on_a_runtime_is_released_though_its_locker_is_gone() {
    let shared = MemoryBackend::new();
    let backend = SlowRelease(shared.clone());
    let locker =
        Locker::from_async(|| async move { Ok(lock_core::Locker::new(backend)) }).expect("runtime");
    let guard = locker.lock("a").expect("free");
    drop(locker);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move { drop(guard) });
    let other = Locker::new(shared).expect("runtime");
    taken_within_10s(&other, "a", "never released (its default TTL is 30 s)");
}

/// Takes `name` as soon as it is free, within 10 s, and releases it;
/// panics with `why` if it stays held.
fn taken_within_10s(locker: &Locker, name: &str, why: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match locker.try_lock(name) {
            Ok(g) => break g.release().expect("release"),
            Err(e) if e.is_busy() && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{why}: {e}"),
        }
    }
}

/// The in-memory backend with releases that take a while, as a server's do.
#[derive(Debug)]
struct SlowRelease(MemoryBackend);

#[async_trait]
impl LockBackend for SlowRelease {
    fn capabilities(&self) -> lock_core::Capabilities {
        self.0.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> lock_core::Result<Option<Lease>> {
        self.0.try_acquire(req).await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> lock_core::Result<Lease> {
        self.0.renew(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> lock_core::Result<()> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.0.release(lease).await
    }
    async fn abandon(&self, req: &AcquireRequest) -> lock_core::Result<()> {
        self.0.abandon(req).await
    }
}
