use super::*;
use crate::SqlBackend;

#[test]
fn bad_fields_are_config_errors_naming_the_option() {
    let (postgres, sqlite) = (crate::POSTGRES_NAME, crate::SQLITE_NAME);
    let checked = SqlConfig::default()
        .schema("s")
        .table("t")
        .check(postgres)
        .unwrap();
    assert_eq!(checked.table.as_str(), "t");
    assert_eq!(checked.schema.unwrap().as_str(), "s");
    let zero = Duration::ZERO;
    let cases = [
        (
            SqlConfig::default().table("a-b"),
            postgres,
            "\"table\": table name \"a-b\"",
        ),
        (
            SqlConfig::default().schema("x y"),
            postgres,
            "\"schema\": table name \"x y\"",
        ),
        (
            SqlConfig::default().schema("s"),
            sqlite,
            "\"schema\" applies to PostgreSQL only",
        ),
        (
            SqlConfig::default().pool_size(0),
            sqlite,
            "\"pool_size\" must be from 1 to 64",
        ),
        (
            SqlConfig::default().pool_size(65),
            postgres,
            "\"pool_size\" must be from 1 to 64",
        ),
        (
            SqlConfig::default().timeout(zero),
            postgres,
            "\"timeout\" must be more than zero",
        ),
        (
            SqlConfig::default().connect_timeout(zero),
            sqlite,
            "\"connect_timeout\" must be",
        ),
    ];
    for (config, backend, expected) in cases {
        let err = config.check(backend).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidConfig { backend: b, reason, .. }
                if *b == backend && reason.contains(expected)),
            "{expected}: {err:?}"
        );
    }
}

#[tokio::test]
async fn a_config_that_names_no_database_is_refused() {
    let err = SqlBackend::connect_with(SqlConfig::default().timeout(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig { reason, .. } if reason.contains("SqlConfig::from_url")),
        "{err:?}"
    );
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::path::PathBuf;

    use super::*;
    use crate::config::sqlite::Config;

    #[test]
    fn pools_follow_the_fields_at_connect() {
        let checked = SqlConfig::default()
            .pool_size(9)
            .connect_timeout(Duration::from_millis(1500))
            .check(crate::SQLITE_NAME)
            .unwrap();
        let pool = checked.pool_options::<sqlx::Sqlite>();
        assert_eq!(pool.get_max_connections(), 9);
        assert_eq!(pool.get_acquire_timeout(), Duration::from_millis(1500));
        assert!(!pool.get_test_before_acquire());
    }

    #[test]
    fn code_and_urls_meet_one_check() {
        let url: SqlConfig = "sqlite://x.db?table=t&pool_size=8&timeout=2s&create_tables=false"
            .parse()
            .unwrap();
        let code = SqlConfig::from_url("sqlite://x.db")
            .unwrap()
            .table("t")
            .pool_size(8)
            .timeout(Duration::from_secs(2))
            .create_tables(false);
        assert_eq!(format!("{url:?}"), format!("{code:?}"));
        for (url, expected) in [
            ("sqlite://x.db?table=a-b", "\"table\": table name \"a-b\""),
            (
                "sqlite://x.db?schema=s",
                "\"schema\" applies to PostgreSQL only",
            ),
            (
                "sqlite://x.db?pool_size=65",
                "\"pool_size\" must be from 1 to 64",
            ),
            (
                "sqlite://x.db?timeout=0s",
                "\"timeout\" must be more than zero",
            ),
            (
                "sqlite://x.db?connect_timeout=0s",
                "\"connect_timeout\" must be",
            ),
        ] {
            let err = SqlConfig::from_url(url).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidUrl { reason, .. } if reason.contains(expected)),
                "{url}: {err:?}"
            );
        }
    }

    /// Fails if `connect_with` stops checking: SQLite would open the file
    /// with these values.
    #[tokio::test]
    async fn fields_changed_after_parsing_are_checked_at_connect() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/x.db", dir.path().display());
        let parsed = SqlConfig::from_url(&url).unwrap();
        for (config, option) in [
            (parsed.clone().timeout(Duration::ZERO), "\"timeout\""),
            (parsed.clone().pool_size(0), "\"pool_size\""),
            (parsed.clone().table("a;b"), "\"table\""),
            (parsed.schema("s"), "\"schema\""),
        ] {
            let err = SqlBackend::connect_with(config).await.unwrap_err();
            assert!(
                matches!(&err, Error::InvalidConfig { backend: "sqlite", reason, .. } if reason.contains(option)),
                "{option}: {err:?}"
            );
        }
        assert!(!dir.path().join("x.db").exists(), "a file was made");
    }

    /// The timeout is read when the backend is made, not when the URL was.
    #[tokio::test]
    async fn a_timeout_changed_after_parsing_takes_effect() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/x.db?timeout=2s", dir.path().display());
        let config = SqlConfig::from_url(&url)
            .unwrap()
            .timeout(Duration::from_secs(7));
        let backend = SqlBackend::connect_with(config).await.unwrap();
        let debug = format!("{backend:?}");
        // The client's limit is the server's plus a second.
        assert!(debug.contains("op_timeout: 8s"), "{debug}");
    }

    #[test]
    fn urls_name_a_file_and_known_options() {
        let url = "sqlite://dir/x.db?table=t1&timeout=2s&synchronous=normal";
        let c = crate::SqlConfig::from_url(url).unwrap();
        assert_eq!(c.table, "t1");
        assert_eq!(c.timeout, Duration::from_secs(2));
        let debug = format!("{c:?}");
        assert!(
            debug.contains(r#"path: "dir/x.db", synchronous: Normal"#),
            "{debug}"
        );
        let path = |url| {
            Config::parse(url, QueryOptions::parse(url).unwrap())
                .unwrap()
                .path
        };
        assert_eq!(path("sqlite:///tmp/a%20b.db"), PathBuf::from("/tmp/a b.db"));
        assert_eq!(path("sqlite:x.db"), PathBuf::from("x.db"));
    }

    #[test]
    fn bad_urls_say_what_is_accepted() {
        let cases = [
            ("sqlite://", "no database file"),
            ("sqlite://x.db?tabel=t", "accepted options: table"),
            ("sqlite://x.db?table=a;b", "table name"),
            ("sqlite://x.db?timeout=0s", "more than zero"),
            ("sqlite://x.db?timeout=5", "no unit"),
            ("sqlite://x.db?synchronous=off", "full or normal"),
            ("sqlite://x.db?pool_size=0", "from 1 to 64"),
            ("sqlite://x.db?create_tables=no", "true or false"),
        ];
        lock_core::url::assert_refused(crate::SqlConfig::from_url, &cases);
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;

    fn server_config(config: SqlConfig) -> crate::config::postgres::Config {
        match config.connection {
            Connection::Postgres(c) => *c,
            other => panic!("not PostgreSQL: {other:?}"),
        }
    }

    #[test]
    fn the_statement_timeout_comes_from_the_timeout_at_connect() {
        let config = SqlConfig::from_url("postgres://app@db/x?timeout=2s&schema=s")
            .unwrap()
            .timeout(Duration::from_millis(7250));
        assert_eq!(config.schema.as_deref(), Some("s"));
        let timeout = config.check(crate::POSTGRES_NAME).unwrap().timeout;
        let options = server_config(config).connect_options(timeout).unwrap();
        let session = options.get_options().unwrap_or_default();
        assert_eq!(session, "-c statement_timeout=7250", "{session}");
    }

    #[test]
    fn the_url_shown_is_the_one_sqlx_gets() {
        let config =
            SqlConfig::from_url("postgresql://app:pw@db/x?timeout=2s&application_name=a").unwrap();
        let debug = format!("{config:?}");
        assert!(
            debug.contains(r#"url: "postgresql://app:***@db/x?application_name=a""#),
            "{debug}"
        );
        assert!(debug.contains("timeout: 2s"), "{debug}");
    }
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_refuses_a_schema() {
    let err = SqlConfig::from_url("mariadb://app@db/x?schema=s").unwrap_err();
    assert!(
        matches!(&err, Error::InvalidUrl { reason, .. } if reason.contains("PostgreSQL only")),
        "{err:?}"
    );
}
