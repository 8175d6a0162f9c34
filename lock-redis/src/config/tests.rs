use super::*;
use lock_core::secret::Password;
use lock_core::tls::TlsOptions;

#[test]
fn parses_options_and_keeps_the_password_out_of_debug() {
    let c = RedisConfig::parse(
        "redis://app:s3cret@127.0.0.1:7000/2?prefix=svc:&timeout=250ms&wait_replicas=1",
    )
    .unwrap();
    assert_eq!(c.node.label, "127.0.0.1:7000");
    assert_eq!(c.common.prefix, "svc:");
    assert_eq!(c.common.timeout, Duration::from_millis(250));
    assert_eq!(
        c.wait,
        Some(ReplicaWait {
            replicas: 1,
            timeout: Duration::from_secs(1)
        })
    );
    assert!(!format!("{c:?}").contains("s3cret"));
    assert!(!c.node.allow_eviction, "refused unless asked for");
    let allowed = RedisConfig::parse("redis://h?allow_eviction=true").unwrap();
    assert!(allowed.node.allow_eviction);
    assert_eq!(
        RedisConfig::parse("redis://h").unwrap().node.label,
        "h:6379"
    );
}

#[test]
fn a_password_file_is_kept_and_never_beside_a_password() {
    let one = RedisConfig::parse("redis://app@h?password_file=/run/pw").unwrap();
    assert_eq!(one.node.password_file.as_deref(), Some("/run/pw".as_ref()));
    assert!(format!("{one:?}").contains("/run/pw"));
    let cluster = RedisConfig::parse("redis+cluster://app@h:1,h:2?password_file=/run/pw").unwrap();
    assert!(cluster.cluster.iter().all(|n| n.password_file.is_some()));
    let sentinel = RedisConfig::parse("redis+sentinel://app@h:1/m?password_file=/run/pw")
        .unwrap()
        .sentinel
        .unwrap();
    assert_eq!(
        sentinel.password,
        Some(lock_core::secret::Password::File("/run/pw".into()))
    );
    for url in [
        "redis://app:s3cret@h?password_file=/run/pw",
        "redis+cluster://app:s3cret@h:1,h:2?password_file=/run/pw",
        "redis+sentinel://app:s3cret@h:1/m?password_file=/run/pw",
        "redis://h?password_file=",
    ] {
        let err = RedisConfig::parse(url).unwrap_err();
        assert!(err.is_invalid_input(), "{url}: {err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }
}

#[test]
fn tls_options_on_every_scheme() {
    let files = "tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key";
    let expected = TlsOptions::on()
        .ca("/ca.pem")
        .client_cert("/c.pem", "/c.key");
    let one = RedisConfig::parse(&format!("redis://app:s3cret@h:1?{files}")).unwrap();
    assert_eq!(one.node.tls, expected);
    assert_eq!(
        one.node.url(),
        "rediss://app:s3cret@h:1",
        "the files turn TLS on"
    );
    let cluster = RedisConfig::parse(&format!("redis+cluster://h:1,h:2?{files}")).unwrap();
    assert!(cluster.cluster.iter().all(|n| n.tls == expected));
    let sentinel = RedisConfig::parse("rediss+sentinel://h:1,h:2/m").unwrap();
    assert_eq!(sentinel.sentinel.unwrap().tls, TlsOptions::on());
    let public = RedisConfig::parse("redis+sentinel://h:1/m?tls=true").unwrap();
    assert_eq!(public.sentinel.unwrap().tls, TlsOptions::on());
    assert_eq!(
        RedisConfig::parse("rediss://h").unwrap().node.tls,
        TlsOptions::on()
    );
    assert!(
        !RedisConfig::parse("redis://h")
            .unwrap()
            .node
            .tls
            .is_enabled()
    );
    assert!(!format!("{one:?}").contains("s3cret"));
    for name in TlsOptions::URL_OPTIONS {
        assert!(CommonOptions::NAMES.contains(&name), "{name}");
    }
}

#[test]
fn bad_urls_say_what_is_wrong() {
    lock_core::url::assert_refused(
        RedisConfig::parse,
        &[
            ("redis://h?prefix=a b", "prefix"),
            ("redis://h?timeout=0s", "more than zero"),
            ("redis://h?wait_timeout=1s", "needs \"wait_replicas\""),
            ("redis://h?nope=1", "accepted options"),
            ("redis://h?allow_eviction=yes", "true or false"),
            ("redis://", "no host"),
            ("rediss://h?tls=false", "always uses TLS"),
            ("redis://h?tls_key=/k.pem", "go together"),
            ("rediss+sentinel://h:1/m?tls=false", "always uses TLS"),
        ],
    );
}

#[test]
fn cluster_urls_name_seed_nodes_with_shared_credentials() {
    let c = RedisConfig::parse(
        "redis+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001?prefix=svc:&timeout=300ms",
    )
    .unwrap();
    assert!(c.is_cluster() && c.sentinel.is_none());
    let labels: Vec<&str> = c.cluster.iter().map(|n| n.label.as_str()).collect();
    assert_eq!(labels, ["10.0.0.1:7000", "10.0.0.2:7001"]);
    assert_eq!(c.cluster[1].url(), "redis://app:s3cret@10.0.0.2:7001");
    assert_eq!(c.common.timeout, Duration::from_millis(300));
    assert!(!format!("{c:?}").contains("s3cret"));
    let tls = RedisConfig::parse("rediss+cluster://h:1").unwrap();
    assert_eq!(tls.cluster[0].url(), "rediss://h:1");
    for (url, expected) in [
        ("redis+cluster://h:1?wait_replicas=1", "WAIT"),
        ("redis+cluster://h:1?prefix=a{b}", "prefix"),
        ("redis+cluster://h:1/2", "database 0"),
    ] {
        let err = RedisConfig::parse(url).unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains(expected),
            "{url}: {err}"
        );
    }
}

#[test]
fn sentinel_urls_name_the_sentinels_and_the_master() {
    let c = RedisConfig::parse(
        "redis+sentinel://app:s3cret@127.0.0.1:26379,127.0.0.2/mymaster?wait_replicas=1",
    )
    .unwrap();
    let s = c.sentinel.as_ref().unwrap();
    assert_eq!(
        s.sentinels,
        [
            ("127.0.0.1".to_owned(), 26379),
            ("127.0.0.2".to_owned(), 26379)
        ]
    );
    assert_eq!(s.master, "mymaster");
    assert_eq!(s.username.as_deref(), Some("app"));
    assert_eq!(s.password, Some(Password::Given("s3cret".into())));
    assert_eq!(c.wait.map(|w| w.replicas), Some(1));
    assert!(!format!("{c:?}").contains("s3cret"));
    for url in [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/",
        "redis+sentinel://127.0.0.1:x/m",
    ] {
        let err = RedisConfig::parse(url).unwrap_err();
        assert!(err.is_invalid_input(), "{url}: {err}");
        assert!(!err.to_string().contains("s3cret"));
    }
}
