//! What both SQL fault test binaries use: a locker for a URL, and the macro
//! that runs each case on PostgreSQL and on MariaDB.

use std::time::Duration;

use lock_core::{AcquireOptions, Locker, Wait};

pub(crate) async fn locker(url: &str) -> Locker {
    Locker::from_arc(distlock::connect_backend(url).await.expect("connect"))
}

pub(crate) fn opts(ttl: Duration, wait: Wait) -> AcquireOptions {
    AcquireOptions::with_ttl(ttl).wait(wait)
}

/// Generates a test per case on each server, `postgres::<case>` and
/// `mariadb::<case>`, calling the function `<case>(&dyn SqlServer)` beside
/// the invocation. A case listed under `own` stops or restarts its server,
/// so it gets a server of its own; those under `shared` share one per test
/// binary.
macro_rules! on_postgres_and_mariadb {
    (own: [$($own:ident),* $(,)?], shared: [$($shared:ident),* $(,)?] $(,)?) => {
        $crate::common::sql::on_postgres_and_mariadb!(@server postgres, Postgres; [$($own),*], [$($shared),*]);
        $crate::common::sql::on_postgres_and_mariadb!(@server mariadb, Mariadb; [$($own),*], [$($shared),*]);
    };
    (@server $module:ident, $server:ident; [$($own:ident),*], [$($shared:ident),*]) => {
        mod $module {
            use conformance_tests::servers::$module::$server;

            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $own() {
                    super::$own(&$server::start().await).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $shared() {
                    super::$shared($server::shared().await).await;
                }
            )*
        }
    };
}

pub(crate) use on_postgres_and_mariadb;
