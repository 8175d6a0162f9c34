//! A fenced write to PostgreSQL: each row keeps the highest fencing token
//! that wrote it, and a write with an older token changes nothing.
//!
//! ```text
//! DISTLOCK_URL=postgres://user:pass@localhost/app cargo run -p distlock --features postgres --example fenced_postgres
//! ```
//!
//! A lock alone cannot stop a holder that stalled (a GC pause, a stopped
//! VM) past its lease: when it wakes it still believes it holds the lock
//! and writes. The token it got with the lock is older than the next
//! holder's, so the database refuses that write:
//! `UPDATE … WHERE fence_token <= $token`. The same holder may write
//! several times with its own token; nobody may write after a newer one.

use std::time::Duration;

use distlock::backend::acquire_lease;
use distlock::{AcquireOptions, LockKind, Wait};
use sqlx::PgPool;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("DISTLOCK_URL")
        .map_err(|_| "set DISTLOCK_URL to a postgres:// URL (the example creates one table)")?;
    let (new_write, stale_write) = run(&url).await?;
    println!("the new holder's write: {new_write}; the stalled holder's write: {stale_write}");
    Ok(())
}

/// One account written by two holders of the same lock: the first stalls
/// past its lease, the second takes the lock and writes, then the first
/// wakes up and writes. Returns what happened to each write.
pub(crate) async fn run(url: &str) -> Result<(&'static str, &'static str), BoxError> {
    let db = PgPool::connect(url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS fenced_accounts (\
         id TEXT PRIMARY KEY, balance BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)",
    )
    .execute(&db)
    .await?;
    let account = format!("acct-{}", std::process::id());
    sqlx::query("INSERT INTO fenced_accounts (id, balance) VALUES ($1, 100)")
        .bind(&account)
        .execute(&db)
        .await?;
    let lock = format!("account-{account}");

    let (first, second) = (distlock::connect(url).await?, distlock::connect(url).await?);
    let ttl = first.capabilities().min_ttl.max(Duration::from_millis(500));
    // The first holder's lease is not renewed: it stands for a process that
    // stalls right after taking the lock.
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
            let (db, account) = (db.clone(), account.clone());
            async move { fenced_write(&db, &account, 80, held.token().get()).await }
        })
        .await??;
    // The stalled holder wakes up and writes with the token it had.
    let stale_write = fenced_write(&db, &account, 0, stalled.token().get()).await?;
    sqlx::query("DELETE FROM fenced_accounts WHERE id = $1")
        .bind(&account)
        .execute(&db)
        .await?;
    Ok((new_write, stale_write))
}

/// Sets the balance unless a newer token has written the row.
async fn fenced_write(
    db: &PgPool,
    account: &str,
    balance: i64,
    token: u64,
) -> Result<&'static str, BoxError> {
    let token = i64::try_from(token)?;
    let written = sqlx::query(
        "UPDATE fenced_accounts SET balance = $1, fence_token = $2 \
         WHERE id = $3 AND fence_token <= $2",
    )
    .bind(balance)
    .bind(token)
    .bind(account)
    .execute(db)
    .await?;
    Ok(if written.rows_affected() == 1 {
        "accepted"
    } else {
        "refused: a newer holder has written"
    })
}
