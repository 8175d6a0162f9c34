//! Passwords kept out of sight: given in a URL, or read from a file when the
//! backend connects (`password_file=PATH`), so that a password need not
//! appear on a command line (`ps`) or in the URL at all. `Debug` of
//! [`Password`] never shows one.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::url::QueryOptions;

/// The URL option naming a file that holds the password.
pub const PASSWORD_FILE: &str = "password_file";

/// A password: given in the URL, or a file read at connect time.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Password {
    /// The password itself.
    Given(String),
    /// A file whose content (without its trailing newline) is the password.
    File(PathBuf),
}

impl Password {
    /// The password of a URL whose own password (in its user-info or an
    /// option) is `given`: that, or the file named by `password_file`
    /// (taken from `q`). Both at once is a contradiction.
    pub fn from_query(q: &mut QueryOptions, given: Option<String>) -> Result<Option<Self>> {
        match (given, q.take(PASSWORD_FILE)) {
            (Some(_), Some(_)) => Err(given_twice(&q.url)),
            (_, Some(path)) if path.is_empty() => {
                Err(q.invalid(format!("option \"{PASSWORD_FILE}\" needs a file path")))
            }
            (_, Some(path)) => Ok(Some(Self::File(path.into()))),
            (given, None) => Ok(given.map(Self::Given)),
        }
    }

    /// The password, reading the file now if it is one; `backend` is named
    /// in errors.
    pub fn read(&self, backend: &'static str) -> Result<String> {
        match self {
            Self::Given(p) => Ok(p.clone()),
            Self::File(path) => read_password_file(backend, path),
        }
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Given(_) => f.write_str("Password(***)"),
            Self::File(path) => f.debug_tuple("PasswordFile").field(path).finish(),
        }
    }
}

/// The error for `url`, which gives a password both in itself and by
/// `password_file`: for a backend whose URLs keep passwords where
/// [`Password::from_query`] does not look (in each of several hosts, say).
pub fn given_twice(url: &str) -> Error {
    Error::invalid_url(
        url,
        format!("a password is given both in the URL and by option \"{PASSWORD_FILE}\"; give one"),
    )
}

/// Reads the password in the file at `path`: its content without the
/// trailing newline (`\n` or `\r\n`, as editors and `echo` leave one). A
/// file that cannot be read, is not UTF-8 or holds no password is an
/// [`Error::InvalidConfig`] naming `backend`, the option and the path, never
/// the content.
pub fn read_password_file(backend: &'static str, path: &Path) -> Result<String> {
    let invalid = |reason: &str| Error::InvalidConfig {
        backend,
        reason: format!("option \"{PASSWORD_FILE}\" ({}): {reason}", path.display()),
    };
    let bytes = std::fs::read(path).map_err(|e| invalid(&format!("cannot read it: {e}")))?;
    let mut text = String::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err(invalid("it is empty"));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(content: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, content).unwrap();
        f
    }

    #[test]
    fn reads_the_file_without_its_trailing_newline() {
        for (content, expected) in [
            (&b"hunter2\n"[..], "hunter2"),
            (b"hunter2\r\n", "hunter2"),
            (b"hunter2", "hunter2"),
            (b" two words \n\n", " two words \n"),
        ] {
            let f = file(content);
            assert_eq!(read_password_file("redis", f.path()).unwrap(), expected);
        }
    }

    #[test]
    fn a_missing_empty_or_binary_file_is_a_clear_error() {
        let missing = Path::new("/nonexistent/distlock-password");
        let empty = file(b"\n");
        let binary = file(&[0xff, 0xfe, b'\n']);
        for (path, expected) in [
            (missing, "cannot read it"),
            (empty.path(), "it is empty"),
            (binary.path(), "not UTF-8"),
        ] {
            let err = read_password_file("etcd", path).unwrap_err();
            let text = err.to_string();
            assert!(err.is_invalid_input(), "{text}");
            assert!(
                text.contains("etcd")
                    && text.contains(PASSWORD_FILE)
                    && text.contains(&path.display().to_string())
                    && text.contains(expected),
                "{text}"
            );
        }
    }

    #[test]
    fn from_query_takes_the_option_and_refuses_two_passwords() {
        let mut q = QueryOptions::parse("x://h?password_file=/run/pw").unwrap();
        let p = Password::from_query(&mut q, None).unwrap();
        assert_eq!(p, Some(Password::File("/run/pw".into())));
        q.finish(&[]).unwrap();
        let mut q = QueryOptions::parse("x://h").unwrap();
        let p = Password::from_query(&mut q, Some("hunter2".into())).unwrap();
        assert_eq!(p, Some(Password::Given("hunter2".into())));
        assert!(!format!("{p:?}").contains("hunter2"));
        let mut q = QueryOptions::parse("x://u:hunter2@h?password_file=/run/pw").unwrap();
        let err = Password::from_query(&mut q, Some("hunter2".into())).unwrap_err();
        assert!(err.to_string().contains("both"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let mut q = QueryOptions::parse("x://h?password_file=").unwrap();
        assert!(Password::from_query(&mut q, None).is_err());
    }
}
