//! The history: one line per event, appended by every process of a run to
//! one file, stamped with `CLOCK_MONOTONIC` (one clock for every process on
//! a Linux host).
//!
//! A line is `<ns> <pid> <event> [fields…]`:
//!
//! | event | fields | meaning |
//! |---|---|---|
//! | `ready` | | a worker is connected and waits for the run to start |
//! | `invoke` | | an acquire starts |
//! | `grant` | token, deadline ns[, kind] | the acquire returned a lease valid until the deadline; the kind (`permit/N`, `read`, `write`) is left out for the mutex |
//! | `fail` | kind | the acquire failed |
//! | `read` | token, value | the register let a holder with this token read it |
//! | `read-rejected` | token | the register refused the read: it has seen a greater token |
//! | `write` | token, value | a holder asks the register to store the value |
//! | `accepted` / `rejected` | | the register's answer to that write |
//! | `release` | deadline ns | a release starts: the critical section ends here; the lease's deadline as renewals left it |
//! | `released` / `release-failed` | kind | its outcome |
//! | `at-risk` / `lost` | | the guard's lost signal changed |
//! | `fault` | label | a nemesis starts a fault |
//! | `healed` | label | the fault ends |
//! | `probe` | got, wanted | after the workers stopped, the probe took `got` of the `wanted` permits (1 for a mutex or a write) |
//! | `final` | value | the register's value when the run ended |

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::LockKind;

use crate::lock::{kind_word, parse_kind};

/// One event of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A worker is connected and waits for the run to start.
    Ready,
    /// An acquire starts.
    Invoke,
    /// The acquire returned a lease.
    Grant {
        /// Its fencing token.
        token: u64,
        /// The holder's own lease deadline, on `CLOCK_MONOTONIC`.
        deadline_ns: u64,
        /// What was granted.
        kind: LockKind,
    },
    /// The acquire failed; `kind` is [`error_kind`]'s name.
    Fail(String),
    /// The register let the holder read it.
    Read {
        /// The holder's token.
        token: u64,
        /// The value read.
        value: u64,
    },
    /// The register refused the read.
    ReadRejected(u64),
    /// A holder asks the register to store a value.
    Write {
        /// The holder's token.
        token: u64,
        /// The value to store.
        value: u64,
    },
    /// The register stored the last write.
    Accepted,
    /// The register refused the last write.
    Rejected,
    /// A release starts; the lease's deadline as renewals left it.
    Release {
        /// On `CLOCK_MONOTONIC`.
        deadline_ns: u64,
    },
    /// The release succeeded.
    Released,
    /// The release failed.
    ReleaseFailed(String),
    /// The guard reports the lock at risk.
    AtRisk,
    /// The guard reports the lock lost.
    Lost,
    /// A nemesis starts a fault.
    Fault(String),
    /// The fault ends.
    Healed(String),
    /// What the probe at the end of a run could take of the whole lock.
    Probe {
        /// Permits granted.
        got: u32,
        /// Permits asked for.
        wanted: u32,
    },
    /// The register's value when the run ended.
    Final(u64),
}

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// `CLOCK_MONOTONIC`, nanoseconds.
    pub ns: u64,
    /// The process that wrote it.
    pub pid: u32,
    /// What happened.
    pub event: Event,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ", self.ns, self.pid)?;
        match &self.event {
            Event::Ready => write!(f, "ready"),
            Event::Invoke => write!(f, "invoke"),
            Event::Grant {
                token,
                deadline_ns,
                kind,
            } => match kind_word(*kind) {
                Some(word) => write!(f, "grant {token} {deadline_ns} {word}"),
                None => write!(f, "grant {token} {deadline_ns}"),
            },
            Event::Fail(kind) => write!(f, "fail {kind}"),
            Event::Read { token, value } => write!(f, "read {token} {value}"),
            Event::ReadRejected(token) => write!(f, "read-rejected {token}"),
            Event::Write { token, value } => write!(f, "write {token} {value}"),
            Event::Accepted => write!(f, "accepted"),
            Event::Rejected => write!(f, "rejected"),
            Event::Release { deadline_ns } => write!(f, "release {deadline_ns}"),
            Event::Released => write!(f, "released"),
            Event::ReleaseFailed(kind) => write!(f, "release-failed {kind}"),
            Event::AtRisk => write!(f, "at-risk"),
            Event::Lost => write!(f, "lost"),
            Event::Fault(label) => write!(f, "fault {label}"),
            Event::Healed(label) => write!(f, "healed {label}"),
            Event::Probe { got, wanted } => write!(f, "probe {got} {wanted}"),
            Event::Final(value) => write!(f, "final {value}"),
        }
    }
}

impl FromStr for Record {
    type Err = String;

    fn from_str(line: &str) -> Result<Self, String> {
        let bad = || format!("bad history line {line:?}");
        let mut words = line.split_whitespace();
        let mut number =
            || -> Result<u64, String> { words.next().and_then(|w| w.parse().ok()).ok_or_else(bad) };
        let ns = number()?;
        let pid = u32::try_from(number()?).map_err(|_| bad())?;
        let rest: Vec<&str> = line.split_whitespace().skip(2).collect();
        let int = |i: usize| -> Result<u64, String> {
            rest.get(i).and_then(|w| w.parse().ok()).ok_or_else(bad)
        };
        let text = |i: usize| -> Result<String, String> {
            rest.get(i).map(|w| (*w).to_owned()).ok_or_else(bad)
        };
        let event = match rest.first().copied().ok_or_else(bad)? {
            "ready" => Event::Ready,
            "invoke" => Event::Invoke,
            "grant" => Event::Grant {
                token: int(1)?,
                deadline_ns: int(2)?,
                kind: parse_kind(rest.get(3).copied()).ok_or_else(bad)?,
            },
            "fail" => Event::Fail(text(1)?),
            "read" => Event::Read {
                token: int(1)?,
                value: int(2)?,
            },
            "read-rejected" => Event::ReadRejected(int(1)?),
            "write" => Event::Write {
                token: int(1)?,
                value: int(2)?,
            },
            "accepted" => Event::Accepted,
            "rejected" => Event::Rejected,
            "release" => Event::Release {
                deadline_ns: int(1)?,
            },
            "released" => Event::Released,
            "release-failed" => Event::ReleaseFailed(text(1)?),
            "at-risk" => Event::AtRisk,
            "lost" => Event::Lost,
            "fault" => Event::Fault(text(1)?),
            "healed" => Event::Healed(text(1)?),
            "probe" => Event::Probe {
                got: u32::try_from(int(1)?).map_err(|_| bad())?,
                wanted: u32::try_from(int(2)?).map_err(|_| bad())?,
            },
            "final" => Event::Final(int(1)?),
            _ => return Err(bad()),
        };
        Ok(Record { ns, pid, event })
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the same clock in every process
/// of the host, and the one `std::time::Instant` reads on Linux.
pub fn now_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always readable");
    u64::try_from(Duration::from(now).as_nanos()).unwrap_or(u64::MAX)
}

/// An `Instant` of this process on the shared `CLOCK_MONOTONIC` scale.
pub fn instant_ns(at: Instant) -> u64 {
    let (now, ns) = (Instant::now(), now_ns());
    let to_ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if at >= now {
        ns.saturating_add(to_ns(at - now))
    } else {
        ns.saturating_sub(to_ns(now - at))
    }
}

/// The history file of a run, appended to by every process.
#[derive(Clone, Debug)]
pub struct History {
    path: PathBuf,
    pid: u32,
    // Kept open: a worker logs several events per acquisition, and an open
    // and a close around each would sit in the timed loop.
    file: Arc<File>,
}

impl History {
    /// Appends to `path` (created if missing) as this process.
    pub fn open(path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let path = path.into();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self {
            path,
            pid: std::process::id(),
            file: Arc::new(file),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event stamped now. One `write` on a file opened with
    /// `O_APPEND`: lines of different processes never tear.
    pub fn log(&self, event: Event) -> std::io::Result<()> {
        let record = Record {
            ns: now_ns(),
            pid: self.pid,
            event,
        };
        (&*self.file).write_all(format!("{record}\n").as_bytes())
    }

    /// Every record in the file, in time order. A last line cut short by a
    /// killed process is skipped; any other bad line is an error.
    pub fn read(path: &Path) -> Result<Vec<Record>, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the history {}: {e}", path.display()))?;
        let mut records = Vec::new();
        let lines: Vec<&str> = text.split('\n').collect();
        let whole = lines.len().saturating_sub(1); // after the last '\n'
        for (i, line) in lines.iter().enumerate() {
            if line.is_empty() {
                continue;
            }
            match line.parse() {
                Ok(record) => records.push(record),
                Err(_) if i == whole => {}
                Err(e) => return Err(e),
            }
        }
        records.sort_by_key(|r: &Record| r.ns);
        Ok(records)
    }
}

/// Reads a history as it grows: each call returns the records appended
/// since the last one, in file order (which is time order for each
/// process), so a nemesis that watches the workers reads every line once.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Follower {
    /// Follows `path` from its start.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            offset: 0,
            partial: String::new(),
        }
    }

    /// The whole lines appended since the last call; a line still being
    /// written waits for the next call.
    pub fn new_records(&mut self) -> std::io::Result<Vec<Record>> {
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut text = String::new();
        self.offset += file.read_to_string(&mut text)? as u64;
        self.partial.push_str(&text);
        let Some(end) = self.partial.rfind('\n') else {
            return Ok(Vec::new());
        };
        let whole: String = self.partial.drain(..=end).collect();
        whole
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.parse().map_err(std::io::Error::other))
            .collect()
    }
}

/// A short, stable name for an error, for the `fail` and `release-failed`
/// events and the errors-by-kind figure.
pub fn error_kind(error: &lock_core::Error) -> &'static str {
    use lock_core::Error;
    match error {
        Error::Busy { .. } => "busy",
        Error::WaitTimeout { .. } => "wait-timeout",
        Error::NotHeld { .. } => "not-held",
        Error::Lost { .. } => "lost",
        Error::Unavailable { .. } => "unavailable",
        Error::Timeout { .. } => "timeout",
        Error::Backend { .. } => "backend",
        e if e.is_invalid_input() => "invalid-input",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_round_trips_through_its_line() {
        let events = [
            Event::Ready,
            Event::Invoke,
            Event::Grant {
                token: 7,
                deadline_ns: 99,
                kind: LockKind::Exclusive,
            },
            Event::Grant {
                token: 8,
                deadline_ns: 99,
                kind: LockKind::permit(3),
            },
            Event::Grant {
                token: 9,
                deadline_ns: 99,
                kind: LockKind::Read,
            },
            Event::Fail("timeout".into()),
            Event::Read { token: 7, value: 3 },
            Event::ReadRejected(6),
            Event::Write { token: 7, value: 4 },
            Event::Accepted,
            Event::Rejected,
            Event::Release { deadline_ns: 5 },
            Event::Released,
            Event::ReleaseFailed("not-held".into()),
            Event::AtRisk,
            Event::Lost,
            Event::Fault("pause-holder".into()),
            Event::Healed("pause-holder".into()),
            Event::Probe { got: 1, wanted: 2 },
            Event::Final(12),
        ];
        for event in events {
            let record = Record {
                ns: 12_345,
                pid: 42,
                event,
            };
            assert_eq!(record.to_string().parse::<Record>(), Ok(record));
        }
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_others_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        std::fs::write(&path, "2 1 invoke\n1 1 grant 3 9\n3 1 rel").unwrap();
        let records = History::read(&path).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].ns, 1, "sorted by time");
        std::fs::write(&path, "2 1 bogus\n1 1 invoke\n").unwrap();
        assert!(History::read(&path).is_err());
    }

    #[test]
    fn a_follower_reads_each_whole_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        let mut follower = Follower::new(&path);
        std::fs::write(&path, "1 7 invoke\n2 7 gra").unwrap();
        let first = follower.new_records().unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].event, Event::Invoke);
        std::fs::write(&path, "1 7 invoke\n2 7 grant 3 9\n3 8 invoke\n").unwrap();
        let next = follower.new_records().unwrap();
        assert_eq!(
            next.iter().map(|r| r.pid).collect::<Vec<_>>(),
            [7, 8],
            "the torn line once it is whole, then the new one"
        );
        assert!(follower.new_records().unwrap().is_empty());
    }

    #[test]
    fn instants_map_onto_the_shared_clock() {
        let later = Instant::now() + Duration::from_secs(2);
        let ns = instant_ns(later);
        let expected = now_ns() + 2_000_000_000;
        assert!(ns.abs_diff(expected) < 50_000_000, "{ns} vs {expected}");
    }
}
