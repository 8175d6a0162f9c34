//! A PostgreSQL or MariaDB server shared by teams the way lock-sql's README
//! ("Least privilege") tells an administrator to set one up: the tables
//! are made by the administrator (the harness's own user), and each team
//! has a user that may read and write its own locks tables (and run their
//! function, on PostgreSQL) and nothing else, connecting with
//! `create_tables=false`.
//!
//! A server named by `DISTLOCK_TEST_POSTGRES_URL` or
//! `DISTLOCK_TEST_MYSQL_URL` must let that URL's user create users and
//! grant rights.

use sqlx::AssertSqlSafe;
use tokio::sync::OnceCell;

use super::{SqlInstance, SqlServer as _};

/// The teams' users.
pub const TEAMS: [&str; 2] = ["team_a", "team_b"];

/// A team user's password.
pub fn password(team: &str) -> String {
    format!("{team}-secret")
}

/// The dialect, for its statements.
#[derive(Clone, Copy, Debug)]
enum Dialect {
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "mysql")]
    MySql,
}

/// A shared SQL server with [`TEAMS`] set up.
#[derive(Debug)]
pub struct SqlTeams {
    server: &'static SqlInstance,
    dialect: Dialect,
}

impl SqlTeams {
    /// The shared PostgreSQL server, its teams made once per test binary.
    #[cfg(feature = "postgres")]
    pub async fn postgres() -> &'static Self {
        static SHARED: OnceCell<SqlTeams> = OnceCell::const_new();
        let server = super::postgres::Postgres::shared().await;
        SHARED
            .get_or_init(|| Self::start(server, Dialect::Postgres))
            .await
    }

    /// The shared MariaDB server, its teams made once per test binary.
    #[cfg(feature = "mysql")]
    pub async fn mariadb() -> &'static Self {
        static SHARED: OnceCell<SqlTeams> = OnceCell::const_new();
        let server = super::mariadb::Mariadb::shared().await;
        SHARED
            .get_or_init(|| Self::start(server, Dialect::MySql))
            .await
    }

    async fn start(server: &'static SqlInstance, dialect: Dialect) -> Self {
        let made = Self { server, dialect };
        for team in TEAMS {
            let pw = password(team);
            let statements = match dialect {
                // Idempotent, for a server that outlives one run.
                #[cfg(feature = "postgres")]
                Dialect::Postgres => vec![
                    format!(
                        "DO $$ BEGIN
                        CREATE ROLE {team} LOGIN;
                     EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
                     END $$"
                    ),
                    format!("ALTER ROLE {team} LOGIN PASSWORD '{pw}'"),
                ],
                #[cfg(feature = "mysql")]
                Dialect::MySql => vec![
                    format!("CREATE USER IF NOT EXISTS '{team}'@'%' IDENTIFIED BY '{pw}'"),
                    format!("ALTER USER '{team}'@'%' IDENTIFIED BY '{pw}'"),
                ],
            };
            made.admin(&statements).await;
        }
        made
    }

    /// Makes `table` (with its companions) as the administrator, lets
    /// `team` use it, and returns the URL on which `team` reaches it with
    /// `create_tables=false`.
    pub async fn granted(&self, team: &str, table: &str) -> String {
        let admin_url = self.server.url(&format!("table={table}"));
        drop(
            distlock::connect_backend(&admin_url)
                .await
                .unwrap_or_else(|e| panic!("the administrator makes {table}: {e}")),
        );
        self.grant(team, table).await
    }

    /// Lets `team` use `table`, which the administrator made, as the
    /// README says; the URL on which `team` reaches it.
    pub async fn grant(&self, team: &str, table: &str) -> String {
        let tables = [
            table.to_owned(),
            format!("{table}_holders"),
            format!("{table}_groups"),
            format!("{table}_elections"),
        ];
        let statements: Vec<String> = match self.dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let functions = [
                    format!("{table}_join(TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT)"),
                    format!("{table}_leave(TEXT, TEXT, TEXT, BIGINT, TEXT)"),
                ]
                .join(", ");
                vec![
                    format!(
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {team}",
                        tables.join(", ")
                    ),
                    format!("REVOKE EXECUTE ON FUNCTION {functions} FROM PUBLIC"),
                    format!("GRANT EXECUTE ON FUNCTION {functions} TO {team}"),
                ]
            }
            #[cfg(feature = "mysql")]
            Dialect::MySql => tables
                .iter()
                .map(|t| format!("GRANT SELECT, INSERT, UPDATE, DELETE ON {t} TO '{team}'@'%'"))
                .collect(),
        };
        self.admin(&statements).await;
        self.url_as(team, table)
    }

    /// The URL on which `team` reaches `table`, whether or not it may use it.
    pub fn url_as(&self, team: &str, table: &str) -> String {
        self.url_with(
            team,
            &password(team),
            &format!("table={table}&create_tables=false"),
        )
    }

    /// The URL of the server as `user` with `password`, with this query.
    pub fn url_with(&self, user: &str, password: &str, query: &str) -> String {
        self.server.url_as(user, password, query)
    }

    /// Runs `statements` (each may be several) as the administrator, or
    /// panics saying which failed.
    pub async fn admin(&self, statements: &[String]) {
        let url = self.server.url("");
        match self.dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => run::<sqlx::PgConnection>(&url, statements).await,
            // sqlx names MariaDB `mysql://`.
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                let url = url.replacen("mariadb://", "mysql://", 1);
                run::<sqlx::MySqlConnection>(&url, statements).await;
            }
        }
    }
}

/// Runs `statements` on a connection of type `C` to `url`.
async fn run<C>(url: &str, statements: &[String])
where
    C: sqlx::Connection,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
{
    let mut conn = C::connect(url).await.expect("the administrator connects");
    for sql in statements {
        sqlx::raw_sql(AssertSqlSafe(sql.clone()))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}
