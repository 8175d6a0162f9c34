//! docker-compose.yml against the backends and the README, read as files
//! (no Docker needed): every backend feature of `distlock` that needs a
//! server has a `DISTLOCK_TEST_*_URL` variable and a service with a
//! healthcheck, and each URL the README gives for a variable reaches
//! services that publish its ports, run the backend's image and have its
//! credentials. Variables whose topology compose does not run (Redis
//! Cluster and Sentinel: `Backend::compose`) have no URL in the README.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use conformance_tests::servers::backends::{BACKENDS, Backend, REDIS};
use conformance_tests::servers::url::ServerUrl;
use serde_yaml_ng::Value;

/// Backend features that need no server.
const SERVERLESS: &[&str] = &["sqlite"];

/// The images a backend's service may run (repositories, without a tag).
fn images(backend: &Backend) -> &'static [&'static str] {
    match backend.feature {
        "postgres" => &["postgres"],
        "mysql" => &["mariadb", "mysql"],
        "redis" | "redlock" => &["redis"],
        "etcd" => &["quay.io/coreos/etcd", "gcr.io/etcd-development/etcd"],
        "zk" => &["zookeeper"],
        "memcache" => &["memcached"],
        other => panic!("tests/compose.rs knows no image for backend feature {other}; add it"),
    }
}

fn repo_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The services of docker-compose.yml, by name.
fn services() -> BTreeMap<String, Value> {
    let compose: Value =
        serde_yaml_ng::from_str(&repo_file("docker-compose.yml")).expect("docker-compose.yml");
    compose["services"]
        .as_mapping()
        .expect("docker-compose.yml has services")
        .iter()
        .map(|(name, service)| {
            let name = name.as_str().expect("a service name").to_owned();
            (name, service.clone())
        })
        .collect()
}

/// distlock's backend features that need a server: those `full` turns on.
fn server_features() -> BTreeSet<String> {
    let manifest = repo_file("distlock/Cargo.toml");
    let full = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("full = ["))
        .expect("distlock/Cargo.toml has a `full` feature listing every backend");
    full.split('"')
        .skip(1)
        .step_by(2)
        .filter(|f| !SERVERLESS.contains(f))
        .map(str::to_owned)
        .collect()
}

/// The values the README gives its `export DISTLOCK_TEST_…_URL=…` lines.
fn documented() -> BTreeMap<String, Vec<String>> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in repo_file("README.md").lines() {
        let Some(assignment) = line.trim().strip_prefix("export ") else {
            continue;
        };
        if let Some((name, value)) = assignment.split_once('=')
            && name.starts_with("DISTLOCK_TEST_")
        {
            found
                .entry(name.to_owned())
                .or_default()
                .push(value.to_owned());
        }
    }
    found
}

/// The one URL the README gives `backend`'s variable, checked as the
/// harness checks it.
fn documented_url(backend: &Backend) -> ServerUrl {
    let documented = documented();
    let values = documented.get(backend.variable).unwrap_or_else(|| {
        panic!(
            "README.md gives no `export {}=…` line for the compose service",
            backend.variable
        )
    });
    assert_eq!(
        values.len(),
        1,
        "README.md gives {} more than once",
        backend.variable
    );
    ServerUrl::parse(backend, &values[0])
        .unwrap_or_else(|why| panic!("README.md's {}: {why}", backend.variable))
}

/// The host ports a service publishes.
fn published_ports(service: &Value) -> Vec<u16> {
    let Some(ports) = service["ports"].as_sequence() else {
        return Vec::new();
    };
    ports
        .iter()
        .filter_map(|entry| match entry {
            // `[IP:]HOST:CONTAINER[/PROTOCOL]`; a bare CONTAINER publishes
            // on a random port.
            Value::String(short) => {
                let parts: Vec<&str> = short.split('/').next()?.split(':').collect();
                (parts.len() >= 2).then(|| parts[parts.len() - 2].to_owned())
            }
            Value::Mapping(_) => match &entry["published"] {
                Value::Number(n) => Some(n.to_string()),
                Value::String(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        })
        .map(|port| {
            port.parse()
                .unwrap_or_else(|_| panic!("published port {port:?} is not one port"))
        })
        .collect()
}

/// A service's environment, from either form compose accepts.
fn environment(service: &Value) -> BTreeMap<String, String> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    };
    match &service["environment"] {
        Value::Mapping(map) => map.iter().map(|(k, v)| (text(k), text(v))).collect(),
        Value::Sequence(list) => list
            .iter()
            .filter_map(|e| e.as_str()?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// The repository of a service's image, without its tag.
fn image_repository(service: &Value) -> String {
    let image = service["image"]
        .as_str()
        .expect("every service names an image");
    match image.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository.to_owned(),
        _ => image.to_owned(),
    }
}

/// A healthcheck that checks something: a command, not switched off.
fn has_healthcheck(service: &Value) -> bool {
    let check = &service["healthcheck"];
    if check["disable"].as_bool() == Some(true) {
        return false;
    }
    match &check["test"] {
        Value::String(command) => !command.trim().is_empty(),
        Value::Sequence(test) => {
            let words: Vec<&str> = test.iter().filter_map(Value::as_str).collect();
            matches!(words.first(), Some(&"CMD" | &"CMD-SHELL"))
                && words[1..].iter().any(|w| !w.trim().is_empty())
        }
        _ => false,
    }
}

/// `(user, password)` pairs a Redis service's command line lets in:
/// `--user NAME on >PASSWORD …`, `--requirepass PASSWORD` (the default
/// user), and the default user without a password unless the command
/// turns it off or gives it one.
fn redis_logins(service: &Value) -> Vec<(String, Option<String>)> {
    let words: Vec<String> = match &service["command"] {
        Value::Sequence(list) => list
            .iter()
            .map(|w| w.as_str().unwrap_or_default().to_owned())
            .collect(),
        Value::String(line) => line.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    let mut users: BTreeMap<String, (bool, Option<String>)> = BTreeMap::new();
    users.insert("default".into(), (true, None));
    let mut i = 0;
    while i < words.len() {
        match words[i].as_str() {
            "--requirepass" => {
                users.insert("default".into(), (true, words.get(i + 1).cloned()));
            }
            "--user" => {
                let name = words.get(i + 1).cloned().unwrap_or_default();
                let (mut on, mut password) = (false, None);
                for rule in words[i + 2..].iter().take_while(|w| !w.starts_with("--")) {
                    match rule.as_str() {
                        "on" => on = true,
                        "off" => on = false,
                        r if r.starts_with('>') => password = Some(r[1..].to_owned()),
                        _ => {}
                    }
                }
                users.insert(name, (on, password));
            }
            _ => {}
        }
        i += 1;
    }
    users
        .into_iter()
        .filter(|(_, (on, _))| *on)
        .map(|(name, (_, password))| (name, password))
        .collect()
}

/// The service's credentials agree with the URL's.
fn assert_credentials(backend: &Backend, url: &ServerUrl, name: &str, service: &Value) {
    let env = environment(service);
    let var = |keys: &[&str]| keys.iter().find_map(|k| env.get(*k).cloned());
    let (user, password) = (
        url.user().map(str::to_owned),
        url.password().map(str::to_owned),
    );
    let what = format!("{} ({})", backend.variable, url.redacted());
    match backend.feature {
        "postgres" => {
            let service_user = var(&["POSTGRES_USER"]).unwrap_or_else(|| "postgres".into());
            let database = var(&["POSTGRES_DB"]).unwrap_or_else(|| service_user.clone());
            assert_eq!(user, Some(service_user), "{what}: user of service {name}");
            // Compared, never shown.
            assert!(
                password == var(&["POSTGRES_PASSWORD"]),
                "{what}: not the password of service {name}"
            );
            assert_eq!(url.path(), database, "{what}: database of service {name}");
        }
        "mysql" => {
            assert_eq!(
                user,
                var(&["MARIADB_USER", "MYSQL_USER"]),
                "{what}: user of service {name}"
            );
            assert!(
                password == var(&["MARIADB_PASSWORD", "MYSQL_PASSWORD"]),
                "{what}: not the password of service {name}"
            );
            assert_eq!(
                Some(url.path().to_owned()),
                var(&["MARIADB_DATABASE", "MYSQL_DATABASE"]),
                "{what}: database of service {name}"
            );
        }
        "redis" | "redlock" => {
            let login = (user.unwrap_or_else(|| "default".into()), password);
            assert!(
                redis_logins(service).contains(&login),
                "{what}: service {name}'s command line has no user {} with that password",
                login.0
            );
        }
        // Their URLs carry no user-info (ServerUrl::parse refuses it).
        _ => {}
    }
}

#[test]
fn every_backend_with_a_server_has_a_variable() {
    let listed: BTreeSet<String> = BACKENDS.iter().map(|b| b.feature.to_owned()).collect();
    assert_eq!(
        listed,
        server_features(),
        "conformance-tests/src/servers/external.rs's BACKENDS and distlock's backend \
         features (less {SERVERLESS:?}) differ"
    );
    let variables: BTreeSet<&str> = BACKENDS
        .iter()
        .filter(|b| b.compose)
        .map(|b| b.variable)
        .collect();
    for name in documented().keys() {
        assert!(
            variables.contains(name.as_str()),
            "README.md exports {name}, which no backend with a compose service reads"
        );
    }
}

#[test]
fn every_service_has_a_healthcheck() {
    let services = services();
    assert!(!services.is_empty());
    for (name, service) in &services {
        assert!(
            has_healthcheck(service),
            "service {name} in docker-compose.yml has no healthcheck; \
             `docker compose up --wait` needs one"
        );
    }
}

#[test]
fn the_readme_urls_reach_services_of_their_backend_with_its_credentials() {
    let services = services();
    let mut used = BTreeSet::new();
    for backend in BACKENDS.iter().filter(|b| b.compose) {
        let url = documented_url(backend);
        for (i, address) in url.addresses().iter().enumerate() {
            let (host, port) = address.rsplit_once(':').expect("host:port");
            assert!(
                ["127.0.0.1", "localhost", "[::1]"].contains(&host),
                "{}: {address} is not on this machine, where compose publishes",
                backend.variable
            );
            let port: u16 = port.parse().expect("a port");
            let serving: Vec<&String> = services
                .iter()
                .filter(|(_, s)| published_ports(s).contains(&port))
                .map(|(name, _)| name)
                .collect();
            let [name] = serving[..] else {
                panic!(
                    "{}: port {port} is published by {} services of docker-compose.yml \
                     ({serving:?}); it must be exactly one",
                    backend.variable,
                    serving.len()
                );
            };
            let service = &services[name];
            let image = image_repository(service);
            assert!(
                images(backend).contains(&image.as_str()),
                "{}: port {port} is service {name}'s, which runs {image}, not one of {:?}",
                backend.variable,
                images(backend)
            );
            assert!(
                has_healthcheck(service),
                "service {name} has no healthcheck"
            );
            assert_credentials(backend, &url.host(i, url.scheme()), name, service);
            used.insert(name.clone());
        }
    }
    let unused: Vec<&String> = services.keys().filter(|n| !used.contains(*n)).collect();
    assert!(
        unused.is_empty(),
        "services no README URL reaches: {unused:?}; document their variable"
    );
}

/// The checks above fail on what they are for: a healthcheck removed, a
/// port or a password changed.
#[test]
fn the_checks_catch_a_missing_healthcheck_a_moved_port_and_a_wrong_password() {
    let mut service = services()["redis"].clone();
    assert!(has_healthcheck(&service));
    assert_eq!(published_ports(&service), [6379]);
    let url = documented_url(&REDIS);
    assert_credentials(&REDIS, &url, "redis", &service);

    service["ports"] = serde_yaml_ng::from_str(r#"["127.0.0.1:6380:6379"]"#).expect("yaml");
    assert_eq!(published_ports(&service), [6380]);
    service["healthcheck"]["disable"] = Value::Bool(true);
    assert!(!has_healthcheck(&service));
    service
        .as_mapping_mut()
        .expect("a mapping")
        .remove("healthcheck");
    assert!(!has_healthcheck(&service));

    let wrong = ServerUrl::parse(&REDIS, "redis://distlock:not-the-password@127.0.0.1:6379")
        .expect("valid");
    let caught = std::panic::catch_unwind(|| {
        assert_credentials(&REDIS, &wrong, "redis", &services()["redis"])
    });
    assert!(caught.is_err(), "a wrong password went unnoticed");
}
