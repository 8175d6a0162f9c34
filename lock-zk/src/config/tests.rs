use super::*;

#[test]
fn the_chroot_is_normalised_as_a_urls_path_is() {
    let chroot = |c: &str| ZkConfig::default().chroot(c).check().map(|o| o.chroot);
    assert_eq!(chroot("app/locks/").unwrap(), "/app/locks");
    assert_eq!(chroot("/app").unwrap(), "/app");
    assert_eq!(chroot("").unwrap(), "");
    assert_eq!(chroot("/").unwrap(), "");
    for (bad, expected) in [
        ("/a//b", "segments"),
        ("//a", "segments"),
        ("/zookeeper/x", "reserves"),
    ] {
        let err = chroot(bad).unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains(expected),
            "{err}"
        );
    }
    let err = ZkConfig::default()
        .timeout(Duration::ZERO)
        .check()
        .unwrap_err();
    assert!(err.to_string().contains("more than zero"), "{err}");
}

#[test]
fn code_and_urls_meet_one_check() {
    let url: ZkConfig =
        "zk://h1,h2:2182/app?session_timeout=4s&auth=digest:bob:pw&timeout=1s&connect_timeout=2s"
            .parse()
            .unwrap();
    let code = ZkConfig::default()
        .hosts(["h1", "h2:2182"])
        .chroot("app")
        .session_timeout(Duration::from_secs(4))
        .digest("bob", Password::Given("pw".to_owned()))
        .timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(2))
        .check()
        .unwrap();
    assert_eq!(format!("{url:?}"), format!("{code:?}"));
    assert_eq!(url.digest, code.digest);
    let defaults: ZkConfig = "zk://127.0.0.1".parse().unwrap();
    assert_eq!(
        format!("{defaults:?}"),
        format!("{:?}", ZkConfig::default())
    );
    for (config, option) in [
        (ZkConfig::default().hosts(Vec::<String>::new()), "\"hosts\""),
        (ZkConfig::default().hosts(["h:port"]), "\"hosts\""),
        (ZkConfig::default().hosts(["a b:1"]), "\"hosts\""),
        (ZkConfig::default().chroot("/a/../b"), "\"chroot\""),
        (ZkConfig::default().chroot("/zookeeper"), "\"chroot\""),
        (
            ZkConfig::default().session_timeout(Duration::ZERO),
            "\"session_timeout\"",
        ),
        (ZkConfig::default().timeout(Duration::ZERO), "\"timeout\""),
        (
            ZkConfig::default().connect_timeout(Duration::ZERO),
            "\"connect_timeout\"",
        ),
        (
            ZkConfig::default().digest("", Password::Given("pw".to_owned())),
            "\"auth\"",
        ),
    ] {
        let e = config.check().unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig { reason, .. } if reason.contains(option)),
            "{e:?}"
        );
    }
    for (url, option) in [
        ("zk://h:port", "\"hosts\""),
        ("zk://h:1/a/../b", "\"chroot\""),
        ("zk://h:1?session_timeout=0s", "\"session_timeout\""),
        ("zk://h:1?timeout=0s", "\"timeout\""),
        ("zk://h:1?connect_timeout=0s", "\"connect_timeout\""),
    ] {
        let e = ZkConfig::from_url(url).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidUrl { reason, .. } if reason.contains(option)),
            "{url}: {e:?}"
        );
    }
}

#[test]
fn digest_credentials_make_nodes_creator_only() {
    assert!(!ZkConfig::default().creator_only);
    assert!(!ZkConfig::from_url("zk://h:1").unwrap().creator_only);
    assert!(
        ZkConfig::from_url("zk://h:1?auth=digest:bob:pw")
            .unwrap()
            .creator_only
    );
    let digest = ZkConfig::default().digest("bob", Password::Given("pw".to_owned()));
    assert!(digest.creator_only);
    assert!(!digest.creator_only(false).creator_only, "turned off after");
    assert!(ZkConfig::default().creator_only(true).check().is_ok());
}

/// Both ways of making a backend check the config before they touch the
/// network: no server is needed for these to fail.
#[tokio::test]
async fn backends_check_the_config_first() {
    for config in [
        ZkConfig::default().timeout(Duration::ZERO),
        ZkConfig::default().chroot("/a//b"),
    ] {
        let e = crate::ZkBackend::connect_with(config).await.unwrap_err();
        assert!(matches!(&e, Error::InvalidConfig { .. }), "{e:?}");
    }
}

#[test]
fn parses_hosts_chroot_and_options() {
    let c = ZkConfig::from_url(
        "zk://127.0.0.1:2181,127.0.0.2/app/locks/?session_timeout=4s&auth=digest:bob:hun:ter2&timeout=1s",
    )
    .unwrap();
    assert_eq!(c.hosts, ["127.0.0.1:2181", "127.0.0.2:2181"]);
    assert_eq!(c.chroot, "/app/locks");
    assert_eq!(c.session_timeout, Duration::from_secs(4));
    assert_eq!(c.timeout, Duration::from_secs(1));
    assert_eq!(
        c.digest,
        Some(("bob".to_owned(), Password::Given("hun:ter2".to_owned()))),
        "the password is everything after the user"
    );
    let from_file = ZkConfig::from_url("zk://h:1?auth=digest:bob&password_file=/run/zk").unwrap();
    assert_eq!(
        from_file.digest,
        Some(("bob".to_owned(), Password::File("/run/zk".into())))
    );
    for (url, expected) in [
        (
            "zk://h:1?password_file=/run/zk",
            "needs \"auth=digest:USER\"",
        ),
        ("zk://h:1?auth=digest:bob:pw&password_file=/run/zk", "both"),
        ("zk://h:1?auth=digest:bob", "digest:USER:PASSWORD"),
    ] {
        let err = ZkConfig::from_url(url).unwrap_err().to_string();
        assert!(err.contains(expected), "{url}: {err}");
    }
    assert_eq!(c.connect_string(), "127.0.0.1:2181,127.0.0.2:2181");
    let plain = ZkConfig::from_url("zk://h:1").unwrap();
    assert_eq!(plain.chroot, "");
    assert_eq!(plain.session_timeout, ZkConfig::DEFAULT_SESSION_TIMEOUT);
    assert!(plain.container_parents);
    assert_eq!(
        ZkConfig::from_url("zk://[::1]:2181/").unwrap().hosts,
        ["[::1]:2181"]
    );
}

#[test]
fn debug_never_shows_the_password() {
    let c = ZkConfig::from_url("zk://h:1?auth=digest:bob:hunter2").unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("hunter2") && shown.contains("bob"),
        "{shown}"
    );
}

#[test]
fn bad_urls_say_what_is_wrong() {
    for (url, why) in [
        ("zk://h:1?auth=sasl:x", "digest:USER:PASSWORD"),
        ("zk://h:1?auth=digest:nopassword", "digest:USER:PASSWORD"),
        ("zk://u:p@h:1", "?auth=digest"),
        ("zk://h:1,,h:2", "empty host"),
        ("zk://h:port", "bad port"),
        ("zk://::1:2181", "brackets"),
        ("zk://h:1//x", "bad chroot"),
        ("zk://h:1/a/../b", "bad chroot"),
        ("zk://h:1/zookeeper/x", "reserves"),
        ("zk://h:1?session_timeout=0s", "more than zero"),
        ("zk://h:1?session_timeout=10", "no unit"),
        ("zk://h:1?bogus=1", "accepted options"),
        ("etcd://h:1", "expected zk://"),
    ] {
        let err = ZkConfig::from_url(url).unwrap_err();
        let text = err.to_string();
        assert!(
            err.is_invalid_input() && text.contains(why),
            "{url}: {text}"
        );
    }
}

#[test]
fn errors_never_show_the_password() {
    let err = ZkConfig::from_url("zk://h:1?auth=digest:bob:hunter2&bogus=1").unwrap_err();
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
    let err = ZkConfig::from_url("zk://h:port?auth=digest:bob:hunter2").unwrap_err();
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
}
