//! The blocking API against real backends: SQLite, and Redis as a server
//! backend. Each check runs on a thread of its own, outside any runtime, as
//! code that is not async would.

use std::time::Duration;

use conformance_tests::Target;
use conformance_tests::targets::UrlTarget;
use distlock::{AcquireOptions, Error};

/// Locks, handles, reentrancy and releases on drop (on the holding thread
/// and on another), through `distlock::blocking::connect(url)`.
fn blocking_checks(url: &str) {
    let a = distlock::blocking::connect(url).expect("connect");
    let b = distlock::blocking::connect(url).expect("connect");
    let name = format!("blocking-{}", std::process::id());

    let guard = a.lock(&name).expect("a free lock");
    assert!(b.try_lock(&name).unwrap_err().is_busy());
    assert!(matches!(a.lock(&name), Err(Error::AlreadyHeld { .. })));
    let again = a
        .lock_with(&name, AcquireOptions::default().reentrant(true))
        .expect("reentrant");
    assert_eq!(again.token(), guard.token());
    drop(guard);
    assert!(
        b.try_lock(&name).unwrap_err().is_busy(),
        "released while a reentrant hold remained"
    );
    std::thread::spawn(move || drop(again))
        .join()
        .expect("thread");
    let next = b
        .try_lock(&name)
        .expect("released by the drop on another thread");
    assert!(next.is_held().expect("is_held"));
    next.release().expect("release");

    let token = a.with_lock(&name, |held| held.token()).expect("with_lock");
    assert!(token.get() > 0);
    let both = a.multi_lock([format!("{name}-2"), format!("{name}-1")]);
    let held = both.lock().expect("both");
    assert!(b.try_lock(format!("{name}-1")).unwrap_err().is_busy());
    drop(held);
    b.try_lock(format!("{name}-2"))
        .expect("released with the multi-guard")
        .release()
        .expect("release");
    let wait = AcquireOptions::with_ttl(Duration::from_secs(10))
        .wait(distlock::Wait::For(Duration::from_millis(200)));
    let _held = a.lock(&name).expect("free");
    assert!(matches!(
        b.lock_with(&name, wait),
        Err(Error::WaitTimeout { .. })
    ));
}

async fn run_blocking(target: UrlTarget) {
    let url = target.url().expect("a URL target");
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || blocking_checks(&url))
            .join()
            .expect("the blocking checks")
    })
    .await
    .expect("blocking task");
    drop(target);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_api_on_sqlite() {
    run_blocking(UrlTarget::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_api_on_redis() {
    run_blocking(UrlTarget::redis().await).await;
}
