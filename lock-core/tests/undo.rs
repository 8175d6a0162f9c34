//! The locker's undo of a failed acquire: it never makes the caller wait a
//! second time on a server that did not answer the first time, and a
//! writer that gave up on a server that did answer leaves no mark behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Lease, LockBackend, WaitBudget, async_trait};
use lock_core::{
    AcquireOptions, Capabilities, Error, LockKind, Locker, MemoryBackend, Result, Wait,
};

/// How long a request to the black-holed server takes to time out.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A memory backend whose server can stop answering: every call then
/// fails after [`TIMEOUT`], having perhaps been applied.
#[derive(Debug, Clone, Default)]
struct BlackHoled {
    inner: MemoryBackend,
    black_holed: Arc<AtomicBool>,
    /// Undos the locker asked for, and how many of them have finished.
    abandons: Arc<AtomicU64>,
    abandoned: Arc<AtomicU64>,
}

impl BlackHoled {
    async fn unanswered(&self) -> Result<()> {
        if self.black_holed.load(Ordering::SeqCst) {
            tokio::time::sleep(TIMEOUT).await;
            return Err(Error::timeout("request", TIMEOUT));
        }
        Ok(())
    }
}

#[async_trait]
impl LockBackend for BlackHoled {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Option<Lease>> {
        self.unanswered().await?;
        self.inner.try_acquire(req).await
    }
    async fn acquire(&self, req: &AcquireRequest, budget: &WaitBudget) -> Result<Lease> {
        lock_core::backend::poll_acquire(self, req, budget, lock_core::backend::Waking::polling())
            .await
    }
    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.unanswered().await?;
        self.inner.renew(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> Result<()> {
        self.unanswered().await?;
        self.inner.release(lease).await
    }
    async fn abandon(&self, req: &AcquireRequest) -> Result<()> {
        self.abandons.fetch_add(1, Ordering::SeqCst);
        let undone = async {
            self.unanswered().await?;
            self.inner.abandon(req).await
        };
        let outcome = undone.await;
        self.abandoned.fetch_add(1, Ordering::SeqCst);
        outcome
    }
}

#[tokio::test(start_paused = true)]
async fn a_try_lock_on_a_black_holed_server_ends_within_one_timeout() {
    let backend = BlackHoled::default();
    let locker = Locker::new(backend.clone());
    backend.black_holed.store(true, Ordering::SeqCst);
    let opts = AcquireOptions::with_ttl(Duration::from_secs(10)).wait(Wait::No);
    for kind in [LockKind::Exclusive, LockKind::Read, LockKind::Write] {
        let started = tokio::time::Instant::now();
        let tried = match kind {
            LockKind::Read => locker.rwlock("a").read_with(opts).await,
            LockKind::Write => locker.rwlock("a").write_with(opts).await,
            _ => locker.lock_with("a", opts).await,
        };
        assert!(tried.is_err(), "{kind}: granted through a black hole");
        assert_eq!(
            started.elapsed(),
            TIMEOUT,
            "{kind}: try_lock waited for the undo of its attempt"
        );
    }
    // The undos still run, in the background; the last one ends a timeout
    // after the last attempt.
    tokio::time::sleep(TIMEOUT * 2).await;
    assert_eq!(backend.abandons.load(Ordering::SeqCst), 3);
    assert_eq!(backend.abandoned.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_writer_that_gives_up_leaves_no_mark_for_the_next_reader() {
    let backend = BlackHoled::default();
    let (locker, other) = (Locker::new(backend.clone()), Locker::new(backend.clone()));
    let opts = AcquireOptions::with_ttl(Duration::from_secs(10));
    let reader = other
        .rwlock("a")
        .read_with(opts.wait(Wait::No))
        .await
        .expect("free");
    let wait = Wait::For(Duration::from_millis(100));
    let writer = locker.rwlock("a").write_with(opts.wait(wait)).await;
    assert!(
        matches!(writer, Err(Error::WaitTimeout { .. })),
        "{writer:?}"
    );
    // Undone before the writer's error came back: a reader right after it
    // is not held back by a writer that is no longer waiting.
    assert_eq!(backend.abandoned.load(Ordering::SeqCst), 1);
    let second = locker.rwlock("a").read_with(opts.wait(Wait::No)).await;
    assert!(second.is_ok(), "a second reader: {second:?}");
    drop(second);
    reader.release().await.expect("release");
}
