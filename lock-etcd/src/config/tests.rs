use super::*;

#[test]
fn parses_members_prefix_and_credentials() {
    let c = EtcdConfig::from_url(
        "etcd://127.0.0.1:2379,127.0.0.2:2379/app/locks?user=u&password=hunter2",
    )
    .unwrap();
    assert_eq!(
        c.endpoints,
        ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]
    );
    assert_eq!(c.prefix, "app/locks/");
    assert!(!format!("{c:?}").contains("hunter2"));
    assert_eq!(EtcdConfig::from_url("etcd://h:1").unwrap().prefix, "");
    let from_file = EtcdConfig::from_url("etcd://h:1?user=u&password_file=/run/etcd").unwrap();
    assert_eq!(
        from_file.credentials,
        Some(("u".to_owned(), Password::File("/run/etcd".into())))
    );
    for url in [
        "etcd://h:1?password_file=/run/etcd",
        "etcd://h:1?user=u&password=p&password_file=/run/etcd",
    ] {
        assert!(
            EtcdConfig::from_url(url).unwrap_err().is_invalid_input(),
            "{url}"
        );
    }
}

#[test]
fn tls_options_turn_on_https() {
    let c = EtcdConfig::from_url("etcd://h:1,h:2?tls=true").unwrap();
    assert_eq!(c.endpoints, ["https://h:1", "https://h:2"]);
    assert_eq!(c.tls, TlsOptions::on());
    let c =
        EtcdConfig::from_url("etcd://h:1?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/c.key").unwrap();
    assert_eq!(
        c.tls,
        TlsOptions::on()
            .ca("/ca.pem")
            .client_cert("/c.pem", "/c.key")
    );
    assert_eq!(c.endpoint_urls(), ["https://h:1"]);
    let mut plain = EtcdConfig::from_url("etcd://h:1").unwrap();
    assert_eq!(plain.endpoint_urls(), ["http://h:1"]);
    plain.tls = TlsOptions::on();
    assert_eq!(plain.endpoint_urls(), ["https://h:1"], "set in code");
    let bare = EtcdConfig::default().endpoints(["h:1"]);
    assert_eq!(bare.endpoint_urls(), ["http://h:1"], "no scheme given");
}

#[test]
fn code_and_urls_meet_one_check() {
    let url: EtcdConfig =
        "etcd://h:1,h:2/app/locks?user=u&password=p&timeout=1s&connect_timeout=2s"
            .parse()
            .unwrap();
    let code = EtcdConfig::default()
        .endpoints(["http://h:1", "http://h:2"])
        .prefix("app/locks/")
        .credentials("u", Password::Given("p".to_owned()))
        .timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(2));
    assert_eq!(format!("{url:?}"), format!("{code:?}"));
    assert_eq!(url.credentials, code.credentials);
    let defaults: EtcdConfig = "etcd://127.0.0.1:2379".parse().unwrap();
    assert_eq!(
        format!("{defaults:?}"),
        format!("{:?}", EtcdConfig::default())
    );
    for (config, option) in [
        (
            EtcdConfig::default().endpoints(Vec::<String>::new()),
            "\"endpoints\"",
        ),
        (
            EtcdConfig::default().endpoints(["http://"]),
            "\"endpoints\"",
        ),
        (EtcdConfig::default().prefix("a b"), "\"prefix\""),
        (
            EtcdConfig::default().credentials("", Password::Given("p".to_owned())),
            "\"user\"",
        ),
        (EtcdConfig::default().timeout(Duration::ZERO), "\"timeout\""),
        (
            EtcdConfig::default().connect_timeout(Duration::ZERO),
            "\"connect_timeout\"",
        ),
    ] {
        let e = config.check().unwrap_err();
        assert!(
            matches!(&e, Error::InvalidConfig { reason, .. } if reason.contains(option)),
            "{e:?}"
        );
    }
    for (url, option) in [
        ("etcd://h:1?timeout=0s", "\"timeout\""),
        ("etcd://h:1?connect_timeout=0s", "\"connect_timeout\""),
        ("etcd://h:1/a b", "\"prefix\""),
        ("etcd://h:1/a\tb", "\"prefix\""),
        ("etcd://h:1?user=&password=p", "\"user\""),
    ] {
        let e = EtcdConfig::from_url(url).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidUrl { reason, .. } if reason.contains(option)),
            "{url}: {e:?}"
        );
    }
}

#[test]
fn the_prefix_is_normalised_as_a_urls_path_is() {
    let checked = |prefix: &str| {
        EtcdConfig::default()
            .prefix(prefix)
            .check()
            .map(|s| s.prefix)
    };
    assert_eq!(checked("/app/locks/").unwrap(), "app/locks/");
    assert_eq!(checked("app/locks").unwrap(), "app/locks/");
    assert_eq!(checked("").unwrap(), "");
    let err = checked("a b").unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("spaces"),
        "{err}"
    );
}

/// Both ways of making a backend check the config before they touch the
/// network: no server is needed for these to fail.
#[tokio::test]
async fn backends_check_the_config_first() {
    for config in [
        EtcdConfig::default().timeout(Duration::ZERO),
        EtcdConfig::default().prefix("a b"),
    ] {
        let e = crate::EtcdBackend::connect_with(config).await.unwrap_err();
        assert!(matches!(&e, Error::InvalidConfig { .. }), "{e:?}");
    }
    let Err(e) =
        crate::client::connect(&EtcdConfig::default().connect_timeout(Duration::ZERO)).await
    else {
        panic!("connected with a zero connect_timeout");
    };
    assert!(matches!(&e, Error::InvalidConfig { .. }), "{e:?}");
}

#[test]
fn bad_urls_say_what_is_wrong() {
    lock_core::url::assert_refused(
        EtcdConfig::from_url,
        &[
            ("etcd://h:1?user=u", "go together"),
            ("etcd://u:p@h:1", "?user="),
            ("etcd://h:1,,h:2", "empty host"),
            ("etcd://h:1?tls=yes", "true or false"),
            ("etcd://h:1?tls_cert=/c.pem", "go together"),
            ("etcd://h:1?tls=false&tls_ca=/ca.pem", "need TLS"),
            ("etcd://h:1?bogus=1", "accepted options"),
            ("etcd://h:1?timeout=0s", "more than zero"),
        ],
    );
}
