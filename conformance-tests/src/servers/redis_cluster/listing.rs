//! What `CLUSTER NODES` and `CLUSTER SHARDS` say, and which slot a key
//! hashes to.

use std::net::SocketAddr;
use std::ops::RangeInclusive;

/// One line of `CLUSTER NODES`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ListedNode {
    pub(super) id: String,
    pub(super) addr: SocketAddr,
    pub(super) flags: Vec<String>,
    /// Its master's id, for a replica.
    pub(super) master_id: Option<String>,
    pub(super) slots: Vec<RangeInclusive<u16>>,
}

impl ListedNode {
    pub(super) fn is_master(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// A master with slots or a replica, up and known to be.
    pub(super) fn settled(&self) -> bool {
        let role = if self.is_master() {
            !self.slots.is_empty()
        } else {
            self.master_id.is_some()
        };
        role && !self
            .flags
            .iter()
            .any(|f| ["fail", "fail?", "handshake", "noaddr"].contains(&f.as_str()))
    }

    pub(super) fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|r| r.contains(&slot))
    }
}

/// `CLUSTER NODES`: `ID IP:PORT@BUS[,HOSTNAME] FLAGS MASTER PING PONG EPOCH
/// LINK SLOT…`, a slot being `N`, `N-M`, or a migration in brackets
/// (skipped). Nodes without an address yet are left out.
pub(super) fn parse_nodes(text: &str) -> Vec<ListedNode> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let address = fields[1].split(['@', ',']).next()?;
            let (ip, port) = address.rsplit_once(':')?;
            let addr = SocketAddr::new(ip.parse().ok()?, port.parse().ok()?);
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
                    None => s.parse().ok().map(|n| n..=n),
                })
                .collect();
            Some(ListedNode {
                id: fields[0].to_owned(),
                addr,
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

/// The `health` of every node in `CLUSTER SHARDS` as `redis-cli` prints it
/// (one field or value a line).
pub(super) fn healths(shards: &str) -> Vec<&str> {
    let lines: Vec<&str> = shards.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|pair| pair[0] == "health")
        .map(|pair| pair[1])
        .collect()
}

/// The part of a key that picks its slot.
pub(super) fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// CRC16-CCITT (XMODEM), Redis Cluster's key hash.
pub(super) fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_give_roles_and_slots() {
        let listed = parse_nodes(
            "47316de6 127.0.0.1:21001@22001 myself,master - 0 1795 1 connected 0-5460 [6000->-e7c8]\n\
             2fa5cfd2 127.0.0.1:21006@22006,node6 slave 47316de6 0 1795 1 connected\n\
             bb9ae6ed 127.0.0.1:21003@22003 master,fail - 1795 1795 3 disconnected\n\
             e7c86846 127.0.0.1:21002@22002 master - 0 1795 2 connected 5461-10921 10922\n\
             0af491ea :0@0 slave,noaddr e7c86846 0 0 2 disconnected\n",
        );
        assert_eq!(listed.len(), 4);
        assert!(listed[0].is_master() && listed[0].serves(5460) && !listed[0].serves(6000));
        assert_eq!(listed[0].slots, [0..=5460]);
        assert_eq!(listed[1].master_id.as_deref(), Some("47316de6"));
        assert_eq!(listed[1].addr.port(), 21006);
        assert!(listed[2].is_master() && listed[2].slots.is_empty());
        assert!(listed[0].settled() && listed[1].settled() && !listed[2].settled());
        assert_eq!(listed[3].slots, [5461..=10921, 10922..=10922]);
    }
}
