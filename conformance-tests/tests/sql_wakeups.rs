//! Wake-ups on the SQL servers: a release wakes one local waiter, however
//! the news arrives (PostgreSQL's `NOTIFY`, or the in-process signal on
//! MariaDB), so two waiters in one process do not both try for one release.

mod common {
    pub(crate) mod sql;
}

use std::time::Duration;

use common::sql::{locker, on_postgres_and_mariadb, opts};
use conformance_tests::servers::SqlServer;
use conformance_tests::targets::fresh_table;
use lock_core::Wait;
use tokio::time::sleep;

on_postgres_and_mariadb!(own: [], shared: [one_release_wakes_one_local_waiter]);

async fn one_release_wakes_one_local_waiter(server: &dyn SqlServer) {
    let url = server.url(&format!("table={}", fresh_table()));
    let locker = locker(&url).await;
    let ttl = Duration::from_secs(30);
    let held = locker
        .lock_with("wake", opts(ttl, Wait::No))
        .await
        .expect("free");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let locker = locker.clone();
            tokio::spawn(async move {
                locker
                    .lock_with("wake", opts(ttl, Wait::For(Duration::from_secs(60))))
                    .await
                    .expect("granted in the end")
            })
        })
        .collect();
    // Both waiters tried once, failed and now wait to be woken.
    sleep(Duration::from_millis(300)).await;
    let before = locker.backend().stats().wakeups;
    held.release().await.expect("release");
    let [mut a, mut b] = <[_; 2]>::try_from(waiters).expect("two waiters");
    let (first, rest) = tokio::select! {
        got = &mut a => (got, b),
        got = &mut b => (got, a),
    };
    let first = first.expect("waiter task");
    // Any second wake-up for the same release arrives within this.
    sleep(Duration::from_millis(500)).await;
    assert_eq!(
        locker.backend().stats().wakeups - before,
        1,
        "{}: one release woke more than one waiter",
        server.label()
    );
    first.release().await.expect("release");
    rest.await
        .expect("waiter task")
        .release()
        .await
        .expect("release");
}
