//! The behaviour suite every distlock backend must pass, written once.
//!
//! A backend joins the suite with one line in `tests/suite.rs`:
//!
//! ```text
//! conformance_suite!(sqlite, async { SqliteTarget::new() });
//! ```
//!
//! which generates one test per case, named `<backend>::<case>`
//! (`sqlite::mutual_exclusion`, …). A [`Target`] hands out independent
//! clients of one lock service; every case makes its own lock names, so cases
//! can share a server. A case that the backend's
//! [`Capabilities`](lock_core::Capabilities) rule out returns
//! [`Verdict::NotApplicable`], which the test prints: nothing passes silently.

#![forbid(unsafe_code)]

pub mod access;
pub mod cases;
pub mod cut;
pub mod kinds;
pub mod proxy;
pub mod servers;
pub mod stress;
pub mod target;
pub mod targets;
pub mod tls_refusals;
pub mod torture;

pub use target::{Target, Verdict, report};

/// Generates the whole suite for one backend as a module of tests.
///
/// `$target` is an expression (usually an `async` block) that evaluates to a
/// future of a [`Target`]; it is evaluated once per test, so each test may
/// start from a fresh database or key prefix. Used from this crate's
/// integration tests, where the `contender` binary is built.
#[macro_export]
macro_rules! conformance_suite {
    ($backend:ident, $target:expr) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;

            $crate::conformance_suite!(@cases $target;
                mutual_exclusion,
                try_acquire_on_held_lock,
                acquire_timeout,
                ttl_expiry_frees_crashed_holder,
                renew_extends_only_for_the_owner,
                extend_renews_now_for_the_owner,
                is_held_asks_the_server,
                non_owner_release_never_deletes,
                fencing_tokens_strictly_increase,
                lost_signal_fires,
                cancel_safety,
                bad_input_rejected,
                semaphore_admits_at_most_n,
                crashed_permit_returns_after_ttl,
                permits_wake_few_waiters,
                readers_share_writer_excludes,
                waiting_writer_is_not_starved,
                a_writer_that_gives_up_lets_readers_in,
                shared_leases_renew_and_release_for_the_owner_only,
                reentrant_holds_share_one_grant,
                reentrant_holds_renew_and_release_on_the_last_drop,
                lock_all_takes_all_or_none,
                lock_all_opposite_orders_never_deadlock,
                lock_all_is_lost_when_any_name_is,
                holders_are_listed_for_every_kind,
                election_one_leader_among_many_candidates,
                election_value_is_read_by_non_candidates,
                election_resign_hands_over,
                election_crashed_leader_is_replaced,
                election_proclaim_keeps_the_term,
                election_observers_see_every_change_in_order,
                election_cancelled_campaigns_leave_nothing,
                election_rejects_bad_input,
            );

            $crate::conformance_suite!(@storms $target;
                cancelled_at_random,
                cancelled_at_random_permits,
                cancelled_at_random_read_write,
            );

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn multi_process() {
                let target = $target.await;
                let verdict =
                    $crate::cases::multi_process(&target, env!("CARGO_BIN_EXE_contender")).await;
                $crate::report(&target, "multi_process", verdict);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn multi_process_semaphore() {
                let target = $target.await;
                let verdict = $crate::cases::multi_process_semaphore(
                    &target,
                    env!("CARGO_BIN_EXE_contender"),
                )
                .await;
                $crate::report(&target, "multi_process_semaphore", verdict);
            }
        }
    };
    (@storms $target:expr; $($storm:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $storm() {
                let target = $target.await;
                let verdict = $crate::stress::$storm(&target).await;
                $crate::report(&target, stringify!($storm), verdict);
            }
        )*
    };
    (@cases $target:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let target = $target.await;
                let verdict = $crate::cases::$case(&target).await;
                $crate::report(&target, stringify!($case), verdict);
            }
        )*
    };
}

/// Generates the suite's core cases for one backend reached another way
/// (over TLS, say): grant and release under contention with waiters woken
/// by releases, try on a held lock, renewal by the owner only, release by
/// a non-owner, fencing order, expiry of a crashed holder and bad input.
/// The same `$target` rules as [`conformance_suite!`].
#[macro_export]
macro_rules! conformance_core {
    ($backend:ident, $target:expr) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;

            $crate::conformance_suite!(@cases $target;
                mutual_exclusion,
                try_acquire_on_held_lock,
                renew_extends_only_for_the_owner,
                non_owner_release_never_deletes,
                fencing_tokens_strictly_increase,
                ttl_expiry_frees_crashed_holder,
                bad_input_rejected,
            );
        }
    };
}
