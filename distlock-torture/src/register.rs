//! The fenced register: the protected resource of Kleppmann's argument,
//! outside the lock service. A file holding the highest token it has seen
//! from anybody, its value, and the highest token it has seen from an
//! exclusive holder, read and written under `flock`.
//!
//! An exclusive holder (the mutex's, a read-write lock's writer) is served
//! only if its token is at least every token seen, reads included, so a
//! holder that read with a newer token makes every older token stale at
//! once. A shared holder (a reader) is served only if its token is at least
//! every exclusive holder's: readers hold together, so one reader's token
//! says nothing against another's, but a reader that read makes every
//! older writer stale, and a writer that read makes every older reader
//! stale. With only exclusive holders this is the classic fence.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// The register's answer to a read or a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Served; a read carries the value.
    Served(T),
    /// Refused: the register has seen a greater token.
    Stale,
}

/// How a holder uses the register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Alone: the mutex's holder, a writer.
    Exclusive,
    /// Beside other shared holders: a reader.
    Shared,
}

/// A handle on the register file; every call locks it for its duration.
#[derive(Clone, Debug)]
pub struct Register {
    path: PathBuf,
}

impl Register {
    /// The register in `path`; a missing or empty file is token 0, value 0.
    pub fn open(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the value as the holder of `token`, on `side`.
    pub fn read(&self, token: u64, side: Side) -> std::io::Result<Verdict<u64>> {
        self.exchange(token, side, |value| (value, value))
    }

    /// Stores `value` as the exclusive holder of `token` (only they write).
    pub fn write(&self, token: u64, value: u64) -> std::io::Result<Verdict<()>> {
        self.exchange(token, Side::Exclusive, |_| (value, ()))
    }

    /// The value, without a token and without raising any.
    pub fn value(&self) -> std::io::Result<u64> {
        let mut file = self.locked()?;
        Ok(State::read(&mut file)?.value)
    }

    fn exchange<T>(
        &self,
        token: u64,
        side: Side,
        apply: impl FnOnce(u64) -> (u64, T),
    ) -> std::io::Result<Verdict<T>> {
        let mut file = self.locked()?;
        let was = State::read(&mut file)?;
        let bar = match side {
            Side::Exclusive => was.seen,
            Side::Shared => was.exclusive,
        };
        if token < bar {
            return Ok(Verdict::Stale);
        }
        let (value, answer) = apply(was.value);
        let now = State {
            seen: was.seen.max(token),
            value,
            exclusive: match side {
                Side::Exclusive => token,
                Side::Shared => was.exclusive,
            },
        };
        if now != was {
            // Fixed width, written over the old text in one `write`: a
            // writer killed at any instant (the kill-holder nemesis) leaves
            // the old state or the new one. Emptying the file first left
            // it empty, read as value 0, when the kill fell in between.
            let text = format!("{:020} {:020} {:020}\n", now.seen, now.value, now.exclusive);
            file.seek(SeekFrom::Start(0))?;
            file.write_all(text.as_bytes())?;
            file.set_len(text.len() as u64)?;
        }
        Ok(Verdict::Served(answer))
    }

    fn locked(&self) -> std::io::Result<Flock<File>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)?;
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e.into())
    }
}

/// The register's contents: `<seen> <value> <exclusive>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    /// The highest token of any holder served.
    seen: u64,
    value: u64,
    /// The highest token of an exclusive holder served.
    exclusive: u64,
}

impl State {
    fn read(file: &mut File) -> std::io::Result<Self> {
        let mut text = String::new();
        file.seek(SeekFrom::Start(0))?;
        file.read_to_string(&mut text)?;
        let numbers: Result<Vec<u64>, _> = text.split_whitespace().map(str::parse).collect();
        match numbers.as_deref() {
            Ok([]) => Ok(State {
                seen: 0,
                value: 0,
                exclusive: 0,
            }),
            Ok(&[seen, value, exclusive]) => Ok(State {
                seen,
                value,
                exclusive,
            }),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the register holds {text:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_highest_token_and_refuses_older_ones() {
        let dir = tempfile::tempdir().unwrap();
        let register = Register::open(dir.path().join("r"));
        let read = |token| register.read(token, Side::Exclusive).unwrap();
        assert_eq!(read(3), Verdict::Served(0));
        assert_eq!(register.write(3, 1).unwrap(), Verdict::Served(()));
        // A newer holder's read makes token 3 stale before it writes.
        assert_eq!(read(5), Verdict::Served(1));
        assert_eq!(register.write(3, 9).unwrap(), Verdict::Stale);
        assert_eq!(read(4), Verdict::Stale);
        assert_eq!(register.write(5, 2).unwrap(), Verdict::Served(()));
        assert_eq!(register.value().unwrap(), 2);
    }

    #[test]
    fn readers_share_and_fence_writers_both_ways() {
        let dir = tempfile::tempdir().unwrap();
        let register = Register::open(dir.path().join("r"));
        let shared = |token| register.read(token, Side::Shared).unwrap();
        let exclusive = |token| register.read(token, Side::Exclusive).unwrap();
        // Readers in any order of their tokens.
        assert_eq!(shared(6), Verdict::Served(0));
        assert_eq!(shared(5), Verdict::Served(0));
        // A writer granted before reader 6 is stale.
        assert_eq!(exclusive(4), Verdict::Stale);
        assert_eq!(register.write(4, 1).unwrap(), Verdict::Stale);
        // A later writer is served, and then older readers are stale.
        assert_eq!(exclusive(7), Verdict::Served(0));
        assert_eq!(register.write(7, 1).unwrap(), Verdict::Served(()));
        assert_eq!(shared(6), Verdict::Stale);
        assert_eq!(shared(8), Verdict::Served(1));
        assert_eq!(register.write(7, 2).unwrap(), Verdict::Stale);
    }

    /// Set for the child process of
    /// `a_writer_killed_at_any_instant_leaves_a_whole_state`: the register
    /// it writes to, over and over.
    const CHILD: &str = "DISTLOCK_REGISTER_WRITER";

    /// In the child: writes rising values with rising tokens until killed.
    #[test]
    fn writer_until_killed() {
        let Some(path) = std::env::var_os(CHILD) else {
            return;
        };
        let register = Register::open(path);
        let start = register.value().unwrap();
        for step in 1.. {
            let token = start + step;
            register.read(token, Side::Exclusive).unwrap();
            register.write(token, token).unwrap();
        }
    }

    /// A holder SIGKILLed at random instants while it writes (as the
    /// kill-holder nemesis does) never leaves the register empty or torn:
    /// its value never goes back.
    #[test]
    fn a_writer_killed_at_any_instant_leaves_a_whole_state() {
        use rand::Rng;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let register = Register::open(&path);
        let mut last = 0;
        for _ in 0..40 {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "register::tests::writer_until_killed",
                    "--test-threads=1",
                ])
                .env(CHILD, &path)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            // Let it start and write a while, then kill it mid-loop.
            let wait = rand::rng().random_range(20..60);
            std::thread::sleep(Duration::from_millis(wait));
            child.kill().unwrap();
            child.wait().unwrap();
            let value = register
                .value()
                .unwrap_or_else(|e| panic!("the register is torn: {e}"));
            assert!(value >= last, "the value went back from {last} to {value}");
            last = value;
        }
        assert!(last > 0, "the writer never wrote");
    }
}
