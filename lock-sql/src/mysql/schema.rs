//! What the MySQL backend keeps in the database: the locks, holders,
//! groups and elections tables; made at start, or only looked for with
//! `create_tables=false`.

use lock_core::Result;
use sqlx::AssertSqlSafe;
use sqlx::mysql::MySqlPool;

use crate::error::ErrorMap;
use crate::provision::Elections;
use crate::table::TableName;

/// MySQL's and MariaDB's "table doesn't exist".
const NO_SUCH_TABLE: u16 = 1146;

/// Makes the tables that are missing (`create`), or fails naming them and
/// the statements an administrator can run.
pub(super) async fn prepare(
    pool: &MySqlPool,
    table: &TableName,
    create: bool,
    errors: &ErrorMap,
) -> Result<()> {
    let tables = tables(table);
    if create {
        // `CREATE TABLE IF NOT EXISTS` is atomic under MySQL's metadata
        // locks: several processes may start at once.
        for (_, create) in tables {
            sqlx::query(AssertSqlSafe(create))
                .execute(pool)
                .await
                .map_err(|e| errors.convert("create table", e))?;
        }
        return Ok(());
    }
    let mut lacking = Vec::new();
    for (name, _) in &tables {
        // `information_schema` hides the tables a user has no rights on,
        // and a query on one says "denied" whether it exists or not: only
        // a user with rights on the database can be told it is missing.
        // One without is refused by each operation, with a hint.
        let probe = format!("SELECT 1 FROM {name} LIMIT 0");
        match sqlx::query(AssertSqlSafe(probe)).execute(pool).await {
            Err(sqlx::Error::Database(db))
                if db
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .is_some_and(|e| e.number() == NO_SUCH_TABLE) =>
            {
                lacking.push(format!("table {name}"));
            }
            Err(e @ sqlx::Error::Database(_)) => {
                tracing::debug!(error = %e, table = %name, "cannot read the table; each operation will say why");
            }
            Err(e) => return Err(errors.convert("inspect table", e)),
            Ok(_) => {}
        }
    }
    let (name, create) = &tables[3];
    let elections = Elections {
        lacking: &format!("table {name}"),
        create,
    };
    crate::provision::require(errors.backend, &lacking, elections, || {
        tables.iter().map(|(_, create)| create.clone()).collect()
    })
}

/// Each table's name and the statement that makes it, the elections
/// table last. Names compare byte for byte (`ascii_bin`), as on the other
/// backends; the default collation would make "Job" and "job" one lock. A
/// leader's value is any UTF-8 text.
fn tables(table: &TableName) -> [(String, String); 4] {
    let (t, h, g, e) = (
        table.as_str().to_owned(),
        table.companion("holders"),
        table.companion("groups"),
        table.companion("elections"),
    );
    let ascii = "CHARACTER SET ascii COLLATE ascii_bin";
    let locks = format!(
        "CREATE TABLE IF NOT EXISTS {t} (
    name VARCHAR(255) {ascii} NOT NULL PRIMARY KEY,
    owner CHAR(32) {ascii} NULL,
    version BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
) ENGINE = InnoDB"
    );
    let holders = format!(
        "CREATE TABLE IF NOT EXISTS {h} (
    family VARCHAR(8) {ascii} NOT NULL,
    name VARCHAR(255) {ascii} NOT NULL,
    owner CHAR(32) {ascii} NOT NULL,
    kind VARCHAR(8) {ascii} NOT NULL,
    token BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (family, name, owner)
) ENGINE = InnoDB"
    );
    let groups = format!(
        "CREATE TABLE IF NOT EXISTS {g} (
    family VARCHAR(8) {ascii} NOT NULL,
    name VARCHAR(255) {ascii} NOT NULL,
    last_token BIGINT NOT NULL,
    PRIMARY KEY (family, name)
) ENGINE = InnoDB"
    );
    let elections = format!(
        "CREATE TABLE IF NOT EXISTS {e} (
    name VARCHAR(255) {ascii} NOT NULL PRIMARY KEY,
    owner CHAR(32) {ascii} NULL,
    version BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    value TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
) ENGINE = InnoDB"
    );
    [(t, locks), (h, holders), (g, groups), (e, elections)]
}
