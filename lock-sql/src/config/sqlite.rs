//! The database of a `sqlite://` URL: its file, and how it syncs.

use std::path::PathBuf;

use lock_core::backend::QueryOptions;
use lock_core::{Error, Result};
use sqlx::sqlite::SqliteSynchronous;

use crate::names::COMMON;

/// The database of a `sqlite://` URL: its file, and how it syncs.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) path: PathBuf,
    pub(crate) synchronous: SqliteSynchronous,
}

impl Config {
    /// Reads the file and `synchronous` from `url`, whose query `q` has
    /// had the common options taken out.
    pub(crate) fn parse(url: &str, mut q: QueryOptions) -> Result<Self> {
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| Error::invalid_url(url, "expected sqlite://PATH"))?;
        let raw_path = rest.split_once('?').map_or(rest, |(p, _)| p);
        let path: String = percent_decode(raw_path);
        if path.is_empty() {
            return Err(Error::invalid_url(
                url,
                "no database file; write sqlite://relative/path.db or sqlite:///absolute/path.db",
            ));
        }
        let synchronous = match q.take("synchronous").as_deref() {
            None | Some("full") => SqliteSynchronous::Full,
            Some("normal") => SqliteSynchronous::Normal,
            Some(other) => {
                return Err(Error::invalid_url(
                    url,
                    format!("option \"synchronous\" must be full or normal, got \"{other}\""),
                ));
            }
        };
        q.finish(&[COMMON, &["synchronous"]].concat())?;
        Ok(Self {
            path: PathBuf::from(path),
            synchronous,
        })
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
