//! The fenced register: the protected resource of Kleppmann's argument,
//! outside the lock service. A file holding `<highest token> <value>`,
//! read and written under `flock`, that serves a holder only if its token
//! is at least the highest it has seen — reads included, so a holder that
//! read with a newer token makes every older token stale at once.

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

    /// Reads the value as the holder of `token`.
    pub fn read(&self, token: u64) -> std::io::Result<Verdict<u64>> {
        self.exchange(token, |_, value| (value, value))
    }

    /// Stores `value` as the holder of `token`.
    pub fn write(&self, token: u64, value: u64) -> std::io::Result<Verdict<()>> {
        self.exchange(token, |_, _| (value, ()))
    }

    /// The value, without a token and without raising the highest one.
    pub fn value(&self) -> std::io::Result<u64> {
        let mut file = self.locked()?;
        Ok(state(&mut file)?.1)
    }

    fn exchange<T>(
        &self,
        token: u64,
        apply: impl FnOnce(u64, u64) -> (u64, T),
    ) -> std::io::Result<Verdict<T>> {
        let mut file = self.locked()?;
        let (highest, value) = state(&mut file)?;
        if token < highest {
            return Ok(Verdict::Stale);
        }
        let (stored, answer) = apply(highest, value);
        if (token, stored) != (highest, value) {
            let text = format!("{token} {stored}\n");
            file.seek(SeekFrom::Start(0))?;
            file.set_len(0)?;
            file.write_all(text.as_bytes())?;
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

fn state(file: &mut File) -> std::io::Result<(u64, u64)> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_string(&mut text)?;
    let mut numbers = text.split_whitespace().map(str::parse::<u64>);
    match (numbers.next(), numbers.next()) {
        (None, _) => Ok((0, 0)),
        (Some(Ok(highest)), Some(Ok(value))) => Ok((highest, value)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the register holds {text:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_highest_token_and_refuses_older_ones() {
        let dir = tempfile::tempdir().unwrap();
        let register = Register::open(dir.path().join("r"));
        assert_eq!(register.read(3).unwrap(), Verdict::Served(0));
        assert_eq!(register.write(3, 1).unwrap(), Verdict::Served(()));
        // A newer holder's read makes token 3 stale before it writes.
        assert_eq!(register.read(5).unwrap(), Verdict::Served(1));
        assert_eq!(register.write(3, 9).unwrap(), Verdict::Stale);
        assert_eq!(register.read(4).unwrap(), Verdict::Stale);
        assert_eq!(register.write(5, 2).unwrap(), Verdict::Served(()));
        assert_eq!(register.value().unwrap(), 2);
    }
}
