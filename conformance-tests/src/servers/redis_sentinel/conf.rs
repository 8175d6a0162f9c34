//! A sentinel's configuration file, and its answers as `redis-cli` prints
//! them.

use std::collections::BTreeMap;

use crate::servers::redis::{Redis, USER};
use crate::servers::tls::TestCa;

/// The name the sentinels know the master by.
pub(super) const NAME: &str = "distlock";

/// A sentinel's configuration, watching the master at `master_port`; over
/// TLS only if `tls`, to clients and to the data nodes alike.
pub(super) fn sentinel_conf(
    port: u16,
    dir: &std::path::Path,
    master_port: u16,
    tls: bool,
) -> String {
    let listen = if tls {
        let pki = TestCa::shared();
        format!(
            "port 0\n\
             tls-port {port}\n\
             tls-cert-file {cert}\n\
             tls-key-file {key}\n\
             tls-ca-cert-file {ca}\n\
             tls-auth-clients yes\n\
             tls-replication yes\n",
            cert = pki.server.cert.display(),
            key = pki.server.key.display(),
            ca = pki.ca.display(),
        )
    } else {
        format!("port {port}\n")
    };
    format!(
        "{listen}\
         bind 127.0.0.1\n\
         dir {dir}\n\
         sentinel resolve-hostnames no\n\
         sentinel announce-ip 127.0.0.1\n\
         sentinel monitor {NAME} 127.0.0.1 {master_port} 2\n\
         sentinel auth-user {NAME} {USER}\n\
         sentinel auth-pass {NAME} {password}\n\
         sentinel down-after-milliseconds {NAME} 2000\n\
         sentinel failover-timeout {NAME} 10000\n\
         sentinel parallel-syncs {NAME} 1\n",
        dir = dir.display(),
        password = Redis::PASSWORD,
    )
}

/// The records of a `SENTINEL MASTER`/`REPLICAS` answer as `redis-cli`
/// prints it: one field or value a line, each record starting with `name`.
pub(super) fn records(text: &str) -> Vec<BTreeMap<String, String>> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut records: Vec<BTreeMap<String, String>> = Vec::new();
    for pair in lines.chunks_exact(2) {
        if pair[0] == "name" || records.is_empty() {
            records.push(BTreeMap::new());
        }
        if let Some(record) = records.last_mut() {
            record.insert(pair[0].to_owned(), pair[1].to_owned());
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_answers_split_into_records() {
        let text = "name\n127.0.0.1:1\nip\n127.0.0.1\nport\n1\nflags\nslave\n\
                    name\n127.0.0.1:2\nip\n127.0.0.1\nport\n2\nflags\nslave,s_down\n";
        let found = records(text);
        assert_eq!(found.len(), 2);
        assert_eq!(found[1]["port"], "2");
        assert_eq!(found[1]["flags"], "slave,s_down");
        assert!(records("").is_empty());
    }
}
