//! Where each family's keys go. Every key is named after the acquire's
//! owner token, so a retried request finds the key it may already have
//! put, and the owner can delete it without knowing its session.
//!
//! - the mutex: `{prefix}{name}/{id}`, as etcd's own `concurrency.Mutex`;
//! - an election: `{prefix}{name}/{owner}`, the whole owner token in hex,
//!   in the mutex's range, as etcd's own `concurrency.Election` shares it
//!   with its `Mutex`: the key's value is what the candidate proclaims, so
//!   its name must tell whose it is;
//! - a semaphore: `{prefix}{name}#sem/leases/{id}`, one per permit taken
//!   or waited for (the range Curator's shape used for its lease keys, with
//!   the same rule, so that older clients admit by the same count);
//! - a read-write lock: `{prefix}{name}#rw/read/{id}` and
//!   `{prefix}{name}#rw/write/{id}`, ordered together by create revision.
//!
//! `#` is not allowed in a lock name, so no mutex's range `{prefix}{name}/`
//! holds a key of another family (but the election's), and no other
//! family's range holds a mutex's key or another name's.

use etcd_client::KeyValue;
use lock_core::backend::AcquireRequest;
use lock_core::backend::{Family, OwnerToken};
use lock_core::{LockKind, LockName};

/// One contender's key and what it waits for: it holds once no key of
/// `blockers` is older than `key`.
#[derive(Clone, Debug)]
pub(crate) struct Line {
    pub(crate) key: String,
    /// A key prefix; `key` may be in it (a mutex, a writer) or not (a reader
    /// waits for older writers only).
    pub(crate) blockers: String,
}

/// The key names under one backend's prefix (empty, or ending in `/`).
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    prefix: String,
}

impl Layout {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The key range of one lock: `{prefix}{name}/`, as etcd's Mutex uses.
    pub(crate) fn dir(&self, name: &LockName) -> String {
        format!("{}{name}/", self.prefix)
    }

    /// One key per acquisition of the mutex.
    pub(crate) fn key(&self, name: &LockName, owner: OwnerToken) -> String {
        format!("{}{:x}", self.dir(name), key_id(owner))
    }

    /// An election candidate's key, in the mutex's range.
    fn candidate_key(&self, name: &LockName, owner: OwnerToken) -> String {
        format!("{}{}", self.dir(name), owner.to_hex())
    }

    /// The key range of a semaphore or read-write lock: its family's tag
    /// after the name. The election's is the mutex's.
    pub(crate) fn family_dir(&self, name: &LockName, family: Family) -> String {
        match family {
            Family::Mutex | Family::Election => self.dir(name),
            _ => format!("{}{name}#{}/", self.prefix, family.tag()),
        }
    }

    /// `{family_dir}{part}/`: one part of a family's range.
    fn part(&self, name: &LockName, family: Family, part: &str) -> String {
        format!("{}{part}/", self.family_dir(name, family))
    }

    /// The range of a semaphore's lease keys, one per permit taken or
    /// waited for.
    pub(crate) fn leases_dir(&self, name: &LockName) -> String {
        self.part(name, Family::Semaphore, "leases")
    }

    /// The line an acquire queues in: the mutex's own (also an election
    /// candidate's); a semaphore's lease keys (where the `N` oldest hold);
    /// a writer behind every older key of the read-write lock, a reader
    /// behind older writers only.
    pub(crate) fn line(&self, req: &AcquireRequest) -> Line {
        let id = key_id(req.owner);
        let (name, family) = (&req.name, req.kind.family());
        let (part, blockers) = match req.kind {
            LockKind::Leader => {
                return Line {
                    key: self.candidate_key(name, req.owner),
                    blockers: self.dir(name),
                };
            }
            LockKind::Permit { .. } => ("leases", self.leases_dir(name)),
            LockKind::Read => ("read", self.part(name, family, "write")),
            LockKind::Write => ("write", self.family_dir(name, family)),
            _ => {
                return Line {
                    key: self.key(name, req.owner),
                    blockers: self.dir(name),
                };
            }
        };
        Line {
            key: format!("{}{id:x}", self.part(name, family, part)),
            blockers,
        }
    }

    /// The key a grant of `kind` holds by, whose create revision is its
    /// fencing token.
    pub(crate) fn held_key(&self, name: &LockName, owner: OwnerToken, kind: LockKind) -> String {
        let id = key_id(owner);
        match kind {
            LockKind::Permit { .. } => format!("{}{id:x}", self.leases_dir(name)),
            LockKind::Read => format!("{}{id:x}", self.part(name, kind.family(), "read")),
            LockKind::Write => format!("{}{id:x}", self.part(name, kind.family(), "write")),
            LockKind::Leader => self.candidate_key(name, owner),
            _ => self.key(name, owner),
        }
    }

    /// Every key an acquire of `req` may have put: its line's.
    pub(crate) fn keys_of(&self, req: &AcquireRequest) -> Vec<String> {
        vec![self.line(req).key]
    }

    /// Every key `req`'s owner may have in `req`'s family: what an
    /// abandoned acquire leaves to delete.
    pub(crate) fn family_keys(&self, req: &AcquireRequest) -> Vec<String> {
        match req.kind {
            LockKind::Read | LockKind::Write => [LockKind::Read, LockKind::Write]
                .map(|kind| self.held_key(&req.name, req.owner, kind))
                .into(),
            _ => self.keys_of(req),
        }
    }
}

/// What an acquire's key holds: an election candidate's, what it
/// proclaims; every other, the owner token.
pub(crate) fn value(req: &AcquireRequest) -> String {
    match req.kind {
        LockKind::Leader => req.value.clone(),
        _ => req.owner.to_hex(),
    }
}

/// Whose a key of a mutex's range is, and what it proclaims.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The owner token in hex, for a key of distlock's; `None` for a key
    /// of another client (`etcdctl lock` or `elect`, named by its lease).
    pub(crate) owner: Option<String>,
    /// An election candidate's value; empty for a mutex's key, whose value
    /// is its owner token.
    pub(crate) value: String,
    /// A key of distlock's: a candidacy or a mutex's.
    pub(crate) kind: Option<LockKind>,
}

impl Entry {
    /// Reads `kv`: a name ending in a whole owner token is a candidate's;
    /// a value that is an owner token whose key ID ends the name is a
    /// mutex's.
    pub(crate) fn of(kv: &KeyValue) -> Self {
        Self::read(kv.key(), kv.value())
    }

    fn read(key: &[u8], value: &[u8]) -> Self {
        let value = String::from_utf8_lossy(value);
        let id = key
            .rsplit(|b| *b == b'/')
            .next()
            .and_then(|id| std::str::from_utf8(id).ok())
            .unwrap_or_default();
        if owner_token(id).is_some() {
            return Self {
                owner: Some(id.to_owned()),
                value: value.into_owned(),
                kind: Some(LockKind::Leader),
            };
        }
        match owner_token(&value) {
            Some(owner) if format!("{:x}", key_id(owner)) == id => Self {
                owner: Some(value.into_owned()),
                value: String::new(),
                kind: Some(LockKind::Exclusive),
            },
            _ => Self {
                owner: None,
                value: value.into_owned(),
                kind: None,
            },
        }
    }
}

/// The owner token `hex` is, written as distlock writes one.
fn owner_token(hex: &str) -> Option<OwnerToken> {
    OwnerToken::from_hex(hex).ok().filter(|o| o.to_hex() == hex)
}

/// `key` as logs and errors show it: the key ID that ends it (63 bits of
/// the owner's token, or the whole token for a candidate's) cut to 8 hex
/// digits, so that no log line carries enough of an owner token to tell
/// its key from a guess.
pub(crate) fn shown(key: &str) -> String {
    match key.rsplit_once('/') {
        Some((dir, id)) if id.len() > 8 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            format!("{dir}/{}…", &id[..8])
        }
        _ => key.to_owned(),
    }
}

/// The key ID for an owner: 63 bits of its token (the key's value holds all
/// of it).
pub(crate) fn key_id(owner: OwnerToken) -> i64 {
    let bits = (owner.to_u128() as u64) >> 1;
    i64::try_from(bits).unwrap_or(i64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_shown_with_their_id_cut_short() {
        let owner = OwnerToken::random();
        let id = format!("{:x}", key_id(owner));
        let key = format!("app/job/{id}");
        let shown = shown(&key);
        assert!(!shown.contains(&id), "{shown}");
        assert_eq!(shown, format!("app/job/{}…", &id[..8]));
        assert_eq!(super::shown("app/job/"), "app/job/");
    }

    #[test]
    fn entries_tell_candidates_mutexes_and_other_clients_apart() {
        let layout = Layout::new("app/");
        let name = LockName::new("job").expect("a name");
        let owner = OwnerToken::random();
        let req = AcquireRequest::new(name.clone(), std::time::Duration::from_secs(5));
        let candidate = req
            .clone()
            .with_kind(LockKind::Leader)
            .with_value("10.0.0.7");
        let key = layout.line(&candidate).key;
        let read = Entry::read(key.as_bytes(), b"10.0.0.7");
        assert_eq!(read.kind, Some(LockKind::Leader));
        assert_eq!(read.value, "10.0.0.7");
        assert_eq!(read.owner, Some(candidate.owner.to_hex()));
        let mutex = Entry::read(
            layout.key(&name, owner).as_bytes(),
            owner.to_hex().as_bytes(),
        );
        let expected = (
            Some(owner.to_hex()),
            String::new(),
            Some(LockKind::Exclusive),
        );
        assert_eq!((mutex.owner, mutex.value, mutex.kind), expected);
        // etcdctl's keys are named by their lease; `etcdctl lock` puts no value.
        for (key, value) in [
            ("app/job/694d7f2a3b1c0e05", "etcdctl's"),
            ("app/job/694d", ""),
        ] {
            let other = Entry::read(key.as_bytes(), value.as_bytes());
            assert_eq!((other.owner, other.kind), (None, None));
            assert_eq!(other.value, value);
        }
        // An owner token under another key's name is no mutex's.
        let elsewhere = Entry::read(b"app/job/1", owner.to_hex().as_bytes());
        assert_eq!(elsewhere.kind, None);
    }
}
