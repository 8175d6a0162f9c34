//! PostgreSQL and MariaDB as stores shared by teams whose users may use
//! their own locks tables only (lock-sql's README, "Least privilege"). A
//! user connecting with `create_tables=false` to a database that lacks the
//! tables is told what is missing and what to run; what it is told to run
//! makes a store that user can lock on; and a user with rights on another
//! team's tables only can neither renew, release, take nor read the owner
//! of a held lock, while the holder keeps it.

use conformance_tests::kinds::Kinds;
use std::sync::Arc;
use std::time::Duration;

use conformance_tests::access::another_identity_is_refused;
use conformance_tests::servers::sql_teams::{SqlTeams, TEAMS, password};
use conformance_tests::targets::fresh_table;
use distlock::backend::LockBackend;
use distlock::{AcquireOptions, Error, LockKind, Locker, Wait};

async fn connect(url: &str) -> Arc<dyn LockBackend> {
    distlock::connect_backend(url)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

async fn another_team_is_refused(teams: &SqlTeams) {
    let (a, b) = (TEAMS[0], TEAMS[1]);
    let (table_a, table_b) = (fresh_table(), fresh_table());
    let owner = connect(&teams.granted(a, &table_a).await).await;
    every_family_works(owner.clone()).await;
    teams.granted(b, &table_b).await;
    // Team b's user finds team a's tables (they exist) but may not use them.
    let other = connect(&teams.url_as(b, &table_a)).await;
    another_identity_is_refused(owner, other, &[&password(a), &password(b)]).await;
}

/// The grants the README lists are enough for semaphores and read-write
/// locks too (their tables, and PostgreSQL's function).
async fn every_family_works(backend: Arc<dyn LockBackend>) {
    let locker = Locker::from_arc(backend);
    for kind in [
        LockKind::permit(2),
        LockKind::Read,
        LockKind::Write,
        LockKind::Leader,
    ] {
        let opts = AcquireOptions::with_ttl(Duration::from_secs(10)).wait(Wait::No);
        let guard = locker
            .lock_kind("families", kind, opts)
            .await
            .unwrap_or_else(|e| panic!("a {kind} lock: {e}"));
        guard.release().await.expect("release");
    }
}

/// Connecting without the tables names them and the statements that make
/// them; the administrator runs exactly those, grants, and the team's user
/// can then lock. `user` reaches the database (`url` is its URL for a
/// table), and can be told a table is missing.
async fn missing_tables_are_named_with_their_statements(
    teams: &SqlTeams,
    team: &str,
    url: impl Fn(&str) -> String,
    function: Option<String>,
) {
    let table = fresh_table();
    let error = match distlock::connect_backend(&url(&table)).await {
        Err(e) => e,
        Ok(_) => panic!("connected although {table} does not exist"),
    };
    let text = error.to_string();
    assert!(
        matches!(error, Error::InvalidConfig { .. }),
        "not a configuration error: {text}"
    );
    assert!(!error.is_retryable(), "a retry cannot make tables: {text}");
    let tables = format!("lacks table {table}, table {table}_holders, table {table}_groups");
    for expected in [
        tables,
        "create_tables=true".to_owned(),
        "Least privilege".to_owned(),
    ]
    .into_iter()
    .chain(function)
    {
        assert!(text.contains(&expected), "{expected:?} not in: {text}");
    }
    assert!(
        !text.contains(&password(team)),
        "the password shows: {text}"
    );
    let script = text
        .split_once("by running:\n\n")
        .and_then(|(_, rest)| rest.split_once(";\n\nthen grant"))
        .map(|(script, _)| script)
        .unwrap_or_else(|| panic!("no statements in: {text}"));
    teams.admin(&[script.to_owned()]).await;
    // The team's user, granted that table alone, locks on it.
    let granted = teams.grant(team, &table).await;
    let locker = Locker::from_arc(connect(&granted).await);
    let guard = locker.try_lock("made-by-hand").await.expect("free");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_another_team_is_refused() {
    another_team_is_refused(SqlTeams::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_another_team_is_refused() {
    another_team_is_refused(SqlTeams::mariadb().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_missing_tables_are_named_with_their_statements() {
    let teams = SqlTeams::postgres().await;
    let team = TEAMS[0];
    missing_tables_are_named_with_their_statements(
        teams,
        team,
        |t| teams.url_as(team, t),
        Some("_join(TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT)".to_owned()),
    )
    .await;
}

/// MariaDB says "denied", not "missing", to a user without rights on the
/// database for a table that does not exist: this user may read and write
/// every table of the database, but create none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_missing_tables_are_named_with_their_statements() {
    let teams = SqlTeams::mariadb().await;
    let (user, pw) = ("data_only", "data-only-secret");
    teams
        .admin(&[
            format!("CREATE USER IF NOT EXISTS '{user}'@'%' IDENTIFIED BY '{pw}'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON distlock.* TO '{user}'@'%'"),
        ])
        .await;
    missing_tables_are_named_with_their_statements(
        teams,
        TEAMS[0],
        |t| teams.url_with(user, pw, &format!("table={t}&create_tables=false")),
        None,
    )
    .await;
}

/// A user refused the right to create tables, connecting with the default
/// `create_tables=true`, is told to connect with `create_tables=false`.
async fn a_user_who_cannot_create_is_told_how_to_connect(teams: &SqlTeams) {
    let team = TEAMS[0];
    teams.granted(team, &fresh_table()).await;
    let url = teams
        .url_as(team, &fresh_table())
        .replace("create_tables=false", "create_tables=true");
    let error = match distlock::connect_backend(&url).await {
        Err(e) => e,
        Ok(_) => panic!("a user without CREATE made tables"),
    };
    let text = error.to_string();
    assert!(text.contains("create_tables=false"), "no hint in: {text}");
    assert!(!error.is_retryable(), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_user_who_cannot_create_is_told_how_to_connect() {
    a_user_who_cannot_create_is_told_how_to_connect(SqlTeams::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_user_who_cannot_create_is_told_how_to_connect() {
    a_user_who_cannot_create_is_told_how_to_connect(SqlTeams::mariadb().await).await;
}
