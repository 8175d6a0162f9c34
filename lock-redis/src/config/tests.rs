use super::sentinel::SentinelConfig;
use super::*;
use lock_core::secret::Password;
use lock_core::tls::TlsOptions;

fn single(config: &RedisConfig) -> &Server {
    match &config.topology {
        Topology::Single(server) => server,
        other => panic!("not one server: {other:?}"),
    }
}

#[test]
fn parses_options_and_keeps_the_password_out_of_debug() {
    let c = RedisConfig::from_url(
        "redis://app:s3cret@127.0.0.1:7000/2?prefix=svc:&timeout=250ms&wait_replicas=1",
    )
    .unwrap();
    assert_eq!(
        single(&c),
        &Server::new("127.0.0.1:7000")
            .db(2)
            .username("app")
            .password(Password::Given("s3cret".into()))
    );
    assert_eq!(c.prefix, "svc:");
    assert_eq!(c.timeout, Duration::from_millis(250));
    assert_eq!(
        (c.wait_replicas, c.wait_timeout),
        (1, Duration::from_secs(1))
    );
    assert!(!format!("{c:?}").contains("s3cret"));
    assert!(!c.allow_eviction, "refused unless asked for");
    assert!(
        RedisConfig::from_url("redis://h?allow_eviction=true")
            .unwrap()
            .allow_eviction
    );
    let plain = RedisConfig::from_url("redis://h").unwrap();
    assert_eq!(single(&plain), &Server::new("h:6379"));
}

#[test]
fn code_and_urls_meet_one_check() {
    let url: RedisConfig = "redis://10.0.0.7/2?prefix=p:&wait_replicas=1&wait_timeout=300ms"
        .parse()
        .unwrap();
    let code = RedisConfig::default()
        .topology(Topology::Single(Server::new("10.0.0.7:6379").db(2)))
        .prefix("p:")
        .wait_replicas(1, Duration::from_millis(300));
    assert_eq!(format!("{url:?}"), format!("{code:?}"));
    assert!(RedisConfig::default().check().is_ok());
    let cluster = |seeds: Vec<Server>| RedisConfig::default().topology(Topology::Cluster(seeds));
    for (config, option) in [
        (RedisConfig::default().prefix("a b"), "prefix"),
        (
            RedisConfig::default().timeout(Duration::ZERO),
            "\"timeout\"",
        ),
        (
            RedisConfig::default().connect_timeout(Duration::ZERO),
            "connect_timeout",
        ),
        (
            RedisConfig::default().wait_replicas(1, Duration::ZERO),
            "wait_timeout",
        ),
        (
            RedisConfig::default().topology(Topology::Single(Server::new(""))),
            "server address",
        ),
        (cluster(Vec::new()), "seed"),
        (cluster(vec![Server::new("h:1").db(3)]), "database 0"),
        (
            cluster(vec![Server::new("h:1").username("a"), Server::new("h:2")]),
            "one user",
        ),
        (cluster(vec![Server::new("h:1")]).prefix("{x}"), "prefix"),
        (
            cluster(vec![Server::new("h:1")]).wait_replicas(1, Duration::from_secs(1)),
            "WAIT",
        ),
        (
            RedisConfig::default().topology(Topology::Sentinel {
                sentinels: vec!["h:x".into()],
                master: "m".into(),
                username: None,
                password: None,
            }),
            "bad address",
        ),
    ] {
        let e = config.check().unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig { reason, .. } if reason.contains(option)),
            "{option}: {e:?}"
        );
    }
}

#[test]
fn a_password_file_is_kept_and_never_beside_a_password() {
    let file = Some(Password::File("/run/pw".into()));
    let one = RedisConfig::from_url("redis://app@h?password_file=/run/pw").unwrap();
    assert_eq!(single(&one).password, file);
    assert!(format!("{one:?}").contains("/run/pw"));
    let cluster =
        RedisConfig::from_url("redis+cluster://app@h:1,h:2?password_file=/run/pw").unwrap();
    let Topology::Cluster(seeds) = &cluster.topology else {
        panic!("{cluster:?}")
    };
    assert!(seeds.iter().all(|s| s.password == file));
    let sentinel = RedisConfig::from_url("redis+sentinel://app@h:1/m?password_file=/run/pw")
        .unwrap()
        .topology;
    assert!(matches!(sentinel, Topology::Sentinel { password, .. } if password == file));
    for url in [
        "redis://app:s3cret@h?password_file=/run/pw",
        "redis+cluster://app:s3cret@h:1,h:2?password_file=/run/pw",
        "redis+sentinel://app:s3cret@h:1/m?password_file=/run/pw",
        "redis://h?password_file=",
    ] {
        let err = RedisConfig::from_url(url).unwrap_err();
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
    let one = RedisConfig::from_url(&format!("redis://app:s3cret@h:1?{files}")).unwrap();
    assert_eq!(one.tls, expected, "the files turn TLS on");
    let cluster = RedisConfig::from_url(&format!("redis+cluster://h:1,h:2?{files}")).unwrap();
    assert_eq!(cluster.tls, expected);
    let sentinel = RedisConfig::from_url("rediss+sentinel://h:1,h:2/m").unwrap();
    assert_eq!(sentinel.tls, TlsOptions::on());
    let public = RedisConfig::from_url("redis+sentinel://h:1/m?tls=true").unwrap();
    assert_eq!(public.tls, TlsOptions::on());
    assert_eq!(
        RedisConfig::from_url("rediss://h").unwrap().tls,
        TlsOptions::on()
    );
    assert!(!RedisConfig::from_url("redis://h").unwrap().tls.is_enabled());
    assert!(!format!("{one:?}").contains("s3cret"));
}

#[test]
fn bad_urls_say_what_is_wrong() {
    lock_core::url::assert_refused(
        RedisConfig::from_url,
        &[
            ("redis://h?prefix=a b", "prefix"),
            ("redis://h?timeout=0s", "more than zero"),
            ("redis://h?wait_timeout=1s", "needs \"wait_replicas\""),
            ("redis://h?nope=1", "accepted options"),
            ("redis://h?allow_eviction=yes", "true or false"),
            ("redis://", "no host"),
            ("redis://h/x", "not a number"),
            ("redis://h:1,h:2", "server address"),
            ("redis://h:notaport", "port"),
            ("redis://h:99999/1", "port"),
            ("redis+cluster://h:1,h:x", "port"),
            ("rediss://h?tls=false", "always uses TLS"),
            ("redis://h?tls_key=/k.pem", "go together"),
            ("rediss+sentinel://h:1/m?tls=false", "always uses TLS"),
            ("memcache://h", "expected redis://"),
        ],
    );
    for url in ["redis://h?prefix=a%20b", "redis://h?timeout=0s"] {
        let e = RedisConfig::from_url(url).unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e:?}");
    }
}

#[test]
fn cluster_urls_name_seed_nodes_with_shared_credentials() {
    let c = RedisConfig::from_url(
        "redis+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001?prefix=svc:&timeout=300ms",
    )
    .unwrap();
    assert!(c.is_cluster());
    let secret = Server::new("")
        .username("app")
        .password(Password::Given("s3cret".into()));
    let at = |addr: &str| Server {
        addr: addr.into(),
        ..secret.clone()
    };
    assert_eq!(
        c.topology,
        Topology::Cluster(vec![at("10.0.0.1:7000"), at("10.0.0.2:7001")])
    );
    assert_eq!(c.timeout, Duration::from_millis(300));
    assert!(!format!("{c:?}").contains("s3cret"));
    assert_eq!(c.topology.label(), "cluster 10.0.0.1:7000,10.0.0.2:7001");
    for (url, expected) in [
        ("redis+cluster://h:1?wait_replicas=1", "WAIT"),
        ("redis+cluster://h:1?prefix=a{b}", "prefix"),
        ("redis+cluster://h:1/2", "database 0"),
    ] {
        let err = RedisConfig::from_url(url).unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains(expected),
            "{url}: {err}"
        );
    }
}

#[test]
fn sentinel_urls_name_the_sentinels_and_the_master() {
    let c = RedisConfig::from_url(
        "redis+sentinel://app:s3cret@127.0.0.1:26379,127.0.0.2/mymaster?wait_replicas=1",
    )
    .unwrap();
    assert_eq!(
        c.topology,
        Topology::Sentinel {
            sentinels: vec!["127.0.0.1:26379".into(), "127.0.0.2:26379".into()],
            master: "mymaster".into(),
            username: Some("app".into()),
            password: Some(Password::Given("s3cret".into())),
        }
    );
    let s = SentinelConfig::of(&c).unwrap().unwrap();
    assert_eq!(s.sentinels[1], ("127.0.0.2".to_owned(), 26379));
    assert_eq!(c.wait_replicas, 1);
    assert!(!format!("{c:?}").contains("s3cret"));
    for url in [
        "redis+sentinel://h:26379/my@master",
        "redis+sentinel://u:p@h:26379/my@master",
    ] {
        let Topology::Sentinel { master, .. } = RedisConfig::from_url(url).unwrap().topology else {
            panic!("{url}")
        };
        assert_eq!(master, "my@master", "{url}");
    }
    assert!(matches!(
        RedisConfig::from_url("redis://[::1]").unwrap().topology,
        Topology::Single(Server { ref addr, .. }) if addr == "[::1]"
    ));
    for url in [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/",
        "redis+sentinel://127.0.0.1:x/m",
    ] {
        let err = RedisConfig::from_url(url).unwrap_err();
        assert!(err.is_invalid_input(), "{url}: {err}");
        assert!(!err.to_string().contains("s3cret"));
    }
}
