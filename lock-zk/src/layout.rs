//! Where each family's nodes live and what they are called: Apache
//! Curator's layouts (`InterProcessMutex`, `InterProcessSemaphoreV2`,
//! `InterProcessReadWriteLock`, `LeaderLatch`), each family under its own
//! root so that a mutex, a semaphore, a read-write lock and an election of
//! one name never meet.

use lock_core::backend::{Family, OwnerToken};
use lock_core::{LockKind, LockName};

/// Lock parents live under this node, below the chroot: `/locks/<name>`.
pub const ROOT: &str = "/locks";
/// Semaphores: `/semaphores/<name>`, holding `locks` and `leases`.
const SEMAPHORES: &str = "/semaphores";
/// Read-write locks: `/rwlocks/<name>`.
const RW_LOCKS: &str = "/rwlocks";
/// Elections: `/elections/<name>`, the path of Curator's `LeaderLatch`.
const ELECTIONS: &str = "/elections";

/// Curator's protection prefix: `_c_<uuid>-` starts every node name.
pub(crate) const PROTECTED: &str = "_c_";

/// The lock name of Curator's `InterProcessMutex`, also the one of the
/// mutex inside a semaphore.
const LOCK: &str = "lock-";
/// `InterProcessSemaphoreV2`'s lease nodes.
const LEASE: &str = "lease-";
/// `InterProcessReadWriteLock`'s two lock names (of equal length there).
const READ: &str = "__READ__";
const WRITE: &str = "__WRIT__";
/// `LeaderLatch`'s candidate nodes.
const LATCH: &str = "latch-";

/// Who of a parent's nodes holds, and what a waiter watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// The first node holds; a waiter watches the node just before its own
    /// (the mutex, a semaphore's mutex, a writer).
    First,
    /// A node holds when no write node comes before it; a waiter watches
    /// the nearest write node before its own (a reader).
    NoWriterBefore,
    /// Nodes are counted, not ordered (a semaphore's leases: see
    /// `semaphore.rs`).
    Count,
}

/// One parent node whose ephemeral-sequential children an acquire queues
/// in, and how our node there is named and admitted.
#[derive(Clone, Debug)]
pub(crate) struct Queue {
    pub(crate) parent: String,
    /// What follows `_c_<uuid>-` in our node's name, before the sequence.
    marker: &'static str,
    /// The names whose sequence numbers order this parent's children.
    markers: &'static [&'static str],
    pub(crate) rule: Rule,
}

impl Queue {
    /// The mutex of `name`: `/locks/<name>/_c_<uuid>-lock-<seq>`.
    pub(crate) fn mutex(name: &LockName) -> Self {
        Self {
            parent: format!("{ROOT}/{name}"),
            marker: LOCK,
            markers: &[LOCK],
            rule: Rule::First,
        }
    }

    /// The mutex inside the semaphore `name`, which one acquirer at a time
    /// holds while it counts the leases:
    /// `/semaphores/<name>/locks/_c_<uuid>-lock-<seq>`.
    pub(crate) fn semaphore_mutex(name: &LockName) -> Self {
        Self {
            parent: format!("{SEMAPHORES}/{name}/locks"),
            ..Self::mutex(name)
        }
    }

    /// The leases of the semaphore `name`:
    /// `/semaphores/<name>/leases/_c_<uuid>-lease-<seq>`.
    pub(crate) fn semaphore_leases(name: &LockName) -> Self {
        Self {
            parent: format!("{SEMAPHORES}/{name}/leases"),
            marker: LEASE,
            markers: &[LEASE],
            rule: Rule::Count,
        }
    }

    /// One side of the read-write lock `name`:
    /// `/rwlocks/<name>/_c_<uuid>-__READ__<seq>` or `…-__WRIT__<seq>`, both
    /// in one sequence.
    fn read_write(name: &LockName, write: bool) -> Self {
        let (marker, rule) = match write {
            true => (WRITE, Rule::First),
            false => (READ, Rule::NoWriterBefore),
        };
        Self {
            parent: format!("{RW_LOCKS}/{name}"),
            marker,
            markers: &[READ, WRITE],
            rule,
        }
    }

    /// Whether readers and writers queue here (a read-write lock).
    pub(crate) fn has_sides(&self) -> bool {
        self.markers.len() > 1
    }

    /// The candidates of the election `name`, queued as the mutex's
    /// acquirers are (the first leads):
    /// `/elections/<name>/_c_<uuid>-latch-<seq>`.
    pub(crate) fn election(name: &LockName) -> Self {
        Self {
            parent: format!("{ELECTIONS}/{name}"),
            marker: LATCH,
            markers: &[LATCH],
            rule: Rule::First,
        }
    }

    /// Where the node of a granted lease of `kind` lives (for a semaphore:
    /// among the leases).
    pub(crate) fn of_lease(name: &LockName, kind: LockKind) -> Self {
        match kind {
            LockKind::Permit { .. } => Self::semaphore_leases(name),
            LockKind::Read => Self::read_write(name, false),
            LockKind::Write => Self::read_write(name, true),
            LockKind::Leader => Self::election(name),
            _ => Self::mutex(name),
        }
    }

    /// Every parent where an owner of `family` may have nodes.
    pub(crate) fn all_of(name: &LockName, family: Family) -> Vec<Self> {
        match family {
            Family::Semaphore => vec![Self::semaphore_mutex(name), Self::semaphore_leases(name)],
            Family::ReadWrite => vec![Self::read_write(name, false)],
            Family::Election => vec![Self::election(name)],
            _ => vec![Self::mutex(name)],
        }
    }

    /// `_c_<uuid>-<marker>` (see [`owner_prefix`]): the name of an owner's node here
    /// before the server appends the sequence number.
    pub(crate) fn node_prefix(&self, owner: OwnerToken) -> String {
        format!("{}{}", owner_prefix(owner), self.marker)
    }

    /// The sequence number of a node: what follows the last of our markers,
    /// as Curator sorts them.
    fn sequence_of(&self, child: &str) -> Option<i64> {
        self.markers.iter().find_map(|m| {
            let (_, digits) = child.rsplit_once(m)?;
            digits.parse().ok()
        })
    }

    /// The nodes among `children`, in queue order.
    pub(crate) fn order<'a>(&self, children: &'a [String]) -> Vec<(i64, &'a String)> {
        let mut queue: Vec<(i64, &String)> = children
            .iter()
            .filter_map(|c| self.sequence_of(c).map(|s| (s, c)))
            .collect();
        queue.sort();
        queue
    }

    /// The node our node at `place` of `order` waits for, or `None` if it
    /// holds.
    pub(crate) fn blocker<'a>(
        &self,
        order: &[(i64, &'a String)],
        place: usize,
    ) -> Option<&'a String> {
        match self.rule {
            Rule::NoWriterBefore => order[..place]
                .iter()
                .rev()
                .map(|(_, n)| *n)
                .find(|n| n.contains(WRITE)),
            _ => place.checked_sub(1).map(|before| order[before].1),
        }
    }
}

/// `_c_<uuid>-`: how every node of one owner starts, whatever the family.
/// The UUID is the owner's short holder id (the token's first 32 bits, as
/// `distlock status` shows it) and 90 bits of the token's SHA-256: the same
/// for every node of the owner, so they are found again after a lost
/// reply, yet not the token itself, which a node name would show to every
/// reader of its parent and to the driver's debug log. Its version and
/// variant bits make it an RFC 9562 version-8 (custom) UUID, which Curator's
/// random (version-4) UUIDs never are: see [`owner_of`].
pub(crate) fn owner_prefix(owner: OwnerToken) -> String {
    let token = owner.to_u128();
    let digest = ring::digest::digest(&ring::digest::SHA256, &token.to_be_bytes());
    let mut tail = [0u8; 16];
    tail[4..].copy_from_slice(&digest.as_ref()[..12]);
    let v = (token & (0xffff_ffff << 96)) | u128::from_be_bytes(tail);
    let v = (v & !(0xf << 76)) | (0x8 << 76);
    let v = (v & !(0x3 << 62)) | (0x2 << 62);
    format!(
        "{PROTECTED}{:08x}-{:04x}-{:04x}-{:04x}-{:012x}-",
        v >> 96,
        (v >> 80) & 0xffff,
        (v >> 64) & 0xffff,
        (v >> 48) & 0xffff,
        v & 0xffff_ffff_ffff
    )
}

/// The holder id of the distlock owner that made the node `name`, `None`
/// for a node another client made (a Curator `LeaderLatch`'s, say): the
/// first 8 hex digits of its UUID when that is distlock's version-8 UUID
/// (see [`owner_prefix`]).
pub(crate) fn owner_of(name: &str) -> Option<&str> {
    let uuid = name.strip_prefix(PROTECTED)?.get(..36)?;
    let bytes = uuid.as_bytes();
    let variant = matches!(bytes[19], b'8' | b'9' | b'a' | b'b');
    (bytes[14] == b'8' && variant).then(|| &uuid[..8])
}

/// `path` as logs show it: the owner's UUID in a node name cut to its
/// first 8 hex digits (the holder id `distlock status` shows), all a
/// reader of the log needs.
pub(crate) fn shown(path: &str) -> String {
    const UUID: usize = 36;
    match path.rfind(PROTECTED) {
        Some(at) if path.len() >= at + PROTECTED.len() + UUID => {
            let start = at + PROTECTED.len();
            let short = &path[start..start + 8];
            format!("{}{short}…{}", &path[..start], &path[start + UUID..])
        }
        _ => path.to_owned(),
    }
}

/// Whether `path` is one of the families' roots, which stay when empty.
pub(crate) fn is_root(path: &str) -> bool {
    path.is_empty() || [ROOT, SEMAPHORES, RW_LOCKS, ELECTIONS].contains(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn node_names_follow_curator() {
        let owner = OwnerToken::from_hex("0123456789abcdef0011223344556677").unwrap();
        let name = LockName::new("x").unwrap();
        let uuid = owner_prefix(owner);
        assert!(uuid[3..].starts_with(&owner.short()));
        assert_eq!(uuid.len(), "_c_01234567-89ab-cdef-0011-223344556677-".len());
        assert_eq!(uuid, owner_prefix(owner), "the same owner, the same name");
        let other = OwnerToken::from_hex("0123456789abcdef0011223344556678").unwrap();
        assert_ne!(uuid, owner_prefix(other), "it depends on the whole token");
        let token_digits = &owner.to_hex()[8..];
        assert!(
            !uuid.replace('-', "").contains(token_digits),
            "the token's hidden digits show: {uuid}"
        );
        let node = format!("/locks/job/{}lock-0000000007", owner_prefix(owner));
        let shown = shown(&node);
        assert_eq!(
            shown,
            format!("/locks/job/_c_{}…-lock-0000000007", owner.short())
        );
        assert_eq!(super::shown("/locks/job"), "/locks/job");
        for (queue, parent, prefix) in [
            (Queue::mutex(&name), "/locks/x", "lock-"),
            (
                Queue::semaphore_mutex(&name),
                "/semaphores/x/locks",
                "lock-",
            ),
            (
                Queue::semaphore_leases(&name),
                "/semaphores/x/leases",
                "lease-",
            ),
            (
                Queue::of_lease(&name, LockKind::Read),
                "/rwlocks/x",
                "__READ__",
            ),
            (
                Queue::of_lease(&name, LockKind::Write),
                "/rwlocks/x",
                "__WRIT__",
            ),
            (
                Queue::of_lease(&name, LockKind::Leader),
                "/elections/x",
                "latch-",
            ),
        ] {
            assert_eq!(queue.parent, parent);
            assert_eq!(queue.node_prefix(owner), format!("{uuid}{prefix}"));
            let node = format!("{}0000000042", queue.node_prefix(owner));
            assert_eq!(queue.sequence_of(&node), Some(42));
            assert_eq!(queue.sequence_of("unrelated"), None);
        }
    }

    /// distlock's UUIDs are version 8, Curator's version 4: a reader tells
    /// whose a node is, and who of distlock's owners made it.
    #[test]
    fn our_nodes_are_told_from_curators() {
        for hex in [
            "0123456789abcdef0011223344556677",
            "ffffffffffffffffffffffffffffffff",
        ] {
            let owner = OwnerToken::from_hex(hex).unwrap();
            let node = format!("{}latch-0000000003", owner_prefix(owner));
            assert_eq!(owner_of(&node), Some(owner.short().as_str()), "{node}");
        }
        let curator = "_c_5b7e0c3a-1f2d-4c8e-9a6b-0d1e2f3a4b5c-latch-0000000001";
        assert_eq!(owner_of(curator), None);
        assert_eq!(owner_of("latch-0000000001"), None);
        assert_eq!(owner_of("_c_short-latch-0000000001"), None);
    }

    #[test]
    fn the_queue_is_ordered_by_sequence_only() {
        let children = names(&[
            "_c_ffffffff-0000-0000-0000-000000000000-lock-0000000003",
            "_c_00000000-0000-0000-0000-000000000000-lock-0000000010",
            "not-a-lock-node",
            "_c_88888888-0000-0000-0000-000000000000-lock-0000000001",
        ]);
        let queue = Queue::mutex(&LockName::new("x").unwrap());
        let order: Vec<i64> = queue.order(&children).iter().map(|(s, _)| *s).collect();
        assert_eq!(order, [1, 3, 10]);
    }

    /// Curator's rules: a writer waits for the node before it, whatever its
    /// side; a reader only for the nearest write node before it.
    #[test]
    fn readers_wait_for_writers_only_and_writers_for_anyone() {
        let name = LockName::new("x").unwrap();
        let children = names(&[
            "_c_00000000-0000-0000-0000-000000000004-__READ__0000000004",
            "_c_00000000-0000-0000-0000-000000000001-__READ__0000000001",
            "_c_00000000-0000-0000-0000-000000000002-__WRIT__0000000002",
            "_c_00000000-0000-0000-0000-000000000003-__READ__0000000003",
            "_c_00000000-0000-0000-0000-000000000005-__WRIT__0000000005",
            "_c_00000000-0000-0000-0000-000000000006-__READ__0000000006",
        ]);
        let (read, write) = (
            Queue::of_lease(&name, LockKind::Read),
            Queue::of_lease(&name, LockKind::Write),
        );
        let order = read.order(&children);
        let seq = |n: Option<&String>| n.map(|n| read.sequence_of(n).unwrap());
        // Reader 1 is first; reader 3 and 4 wait for writer 2, reader 6
        // for writer 5 (not for writer 2).
        assert_eq!(seq(read.blocker(&order, 0)), None);
        assert_eq!(seq(read.blocker(&order, 2)), Some(2));
        assert_eq!(seq(read.blocker(&order, 3)), Some(2));
        assert_eq!(seq(read.blocker(&order, 5)), Some(5));
        // Writer 2 waits for reader 1, writer 5 for reader 4.
        assert_eq!(seq(write.blocker(&order, 1)), Some(1));
        assert_eq!(seq(write.blocker(&order, 4)), Some(4));
        assert_eq!(seq(write.blocker(&order, 0)), None);
    }
}
