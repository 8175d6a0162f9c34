//! `Debug` of every public config type hides passwords and key material:
//! each is built from a URL with a password (and TLS files where the type
//! has them), and its `Debug` output must not contain them.

use std::path::PathBuf;

use distlock::backends::etcd::EtcdConfig;
use distlock::backends::memcache::MemcacheConfig;
use distlock::backends::redis::RedisConfig;
use distlock::backends::redlock::RedlockConfig;
use distlock::backends::sql::SqlConfig;
use distlock::backends::zk::ZkConfig;
use distlock::url::QueryOptions;
use lock_core::secret::Password;

const PASSWORD: &str = "hunter2-Zq9";
/// What a PEM private key holds, were its content ever kept in a config.
const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIKeyMaterialKeyMaterialKeyMaterial00\n-----END PRIVATE KEY-----\n";

/// A directory with a client key whose content must never be shown, and a
/// certificate and CA path beside it.
struct Files {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("client.pem"),
        dir.path().join("client.key"),
    );
    std::fs::write(&key, KEY_PEM).unwrap();
    Files {
        _dir: dir,
        ca,
        cert,
        key,
    }
}

impl Files {
    fn query(&self) -> String {
        format!(
            "tls_ca={}&tls_cert={}&tls_key={}",
            self.ca.display(),
            self.cert.display(),
            self.key.display()
        )
    }
}

#[track_caller]
fn assert_hidden(what: &str, debug: String) {
    assert!(
        !debug.contains(PASSWORD),
        "{what} shows the password: {debug}"
    );
    assert!(
        !debug.contains("KeyMaterial") && !debug.contains("BEGIN PRIVATE KEY"),
        "{what} shows key material: {debug}"
    );
}

#[test]
fn sql_config_hides_the_password() {
    let tls = files();
    for url in [
        format!("postgres://app:{PASSWORD}@db/x"),
        format!("postgresql://app:{PASSWORD}@db:5433/x?table=t&sslmode=require"),
        format!("mysql://app:{PASSWORD}@db/x"),
        format!("mariadb://app:{PASSWORD}@db/x?ssl-mode=required"),
        format!(
            "postgres://app:{PASSWORD}@db/x?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            tls.ca.display(),
            tls.cert.display(),
            tls.key.display()
        ),
        format!(
            "mariadb://app:{PASSWORD}@db/x?ssl-mode=verify_identity&ssl-ca={}&ssl-cert={}&ssl-key={}",
            tls.ca.display(),
            tls.cert.display(),
            tls.key.display()
        ),
        format!("postgres://app:{PASSWORD}@db/x?{}", tls.query()),
        format!("mariadb://app:{PASSWORD}@db/x?{}", tls.query()),
        format!(
            "postgres://app@db/x?password_file=/run/secrets/pg&{}",
            tls.query()
        ),
        "sqlite://locks.db".to_owned(),
    ] {
        let config = SqlConfig::from_url(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let debug = format!("{config:?}");
        assert_hidden(&url, debug.clone());
        if url.contains(PASSWORD) {
            assert!(debug.contains("app:***@db"), "{debug}");
        }
    }
}

#[test]
fn redis_configs_hide_the_password() {
    for url in [
        format!("redis://app:{PASSWORD}@127.0.0.1:6379/2"),
        format!("rediss://:{PASSWORD}@127.0.0.1"),
        format!("redis+cluster://app:{PASSWORD}@10.0.0.1:7000,10.0.0.2:7001"),
        format!("rediss+cluster://app:{PASSWORD}@10.0.0.1:7000"),
        format!("redis+sentinel://app:{PASSWORD}@127.0.0.1:26379/mymaster"),
    ] {
        let config = RedisConfig::from_url(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_hidden(&url, format!("{config:?}"));
        assert_hidden("Topology", format!("{:?}", config.topology));
    }
}

#[test]
fn redlock_config_hides_every_node_password() {
    let url = format!(
        "redlock://a:{PASSWORD}@127.0.0.1:7000,b:{PASSWORD}@127.0.0.1:7001,127.0.0.1:7002?tls=true"
    );
    let config = RedlockConfig::from_url(&url).unwrap();
    assert_hidden("masters", format!("{:?}", config.masters));
    assert_hidden(&url, format!("{config:?}"));
}

#[test]
fn etcd_config_hides_the_password() {
    let url = format!("etcd://127.0.0.1:2379/app?user=app&password={PASSWORD}");
    let config = EtcdConfig::from_url(&url).unwrap();
    assert_hidden(&url, format!("{config:?}"));
    let code = EtcdConfig::default().credentials("app", Password::Given(PASSWORD.to_owned()));
    assert_hidden("EtcdConfig::credentials", format!("{code:?}"));
}

#[test]
fn zk_config_hides_the_password() {
    let url = format!("zk://127.0.0.1:2181/app?auth=digest:app:{PASSWORD}");
    let config = ZkConfig::from_url(&url).unwrap();
    assert_hidden(&url, format!("{config:?}"));
    let code = ZkConfig::default().digest("app", Password::Given(PASSWORD.to_owned()));
    assert_hidden("ZkConfig::digest", format!("{code:?}"));
}

#[test]
fn memcache_config_hides_key_material() {
    let tls = files();
    let url = format!("memcache://127.0.0.1:11211?{}", tls.query());
    let config = MemcacheConfig::from_url(&url).unwrap();
    assert_hidden(&url, format!("{config:?}"));
}

#[test]
fn query_options_and_passwords_hide_their_values() {
    let url = format!("etcd://h:1?user=app&password={PASSWORD}&auth=digest:a:{PASSWORD}");
    let q = QueryOptions::parse(&url).unwrap();
    assert_hidden("QueryOptions", format!("{q:?}"));
    assert_hidden(
        "Password",
        format!("{:?}", Password::Given(PASSWORD.to_owned())),
    );
}
