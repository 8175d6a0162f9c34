//! Helpers every backend uses to read its connection URL: redaction of
//! secrets (from `redact.rs`, which errors use too), query options that
//! reject unknown keys, and durations.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};

pub use crate::redact::redact;

/// The query options of a URL, consumed key by key so that a key nobody
/// asked for is reported instead of silently ignored. `Debug` shows the
/// URL redacted and the keys left, never their values.
pub struct QueryOptions {
    pub(crate) url: String,
    values: BTreeMap<String, String>,
}

impl std::fmt::Debug for QueryOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryOptions")
            .field("url", &redact(&self.url))
            .field("keys", &self.values.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl QueryOptions {
    /// Parses the query string of `url` (everything after the first `?`).
    /// A key given twice is an error.
    pub fn parse(url: &str) -> Result<Self> {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let mut values = BTreeMap::new();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            if values.insert(k.to_string(), v.to_string()).is_some() {
                return Err(Error::invalid_url(
                    url,
                    format!("option \"{k}\" is given twice"),
                ));
            }
        }
        Ok(Self {
            url: url.to_owned(),
            values,
        })
    }

    /// An [`Error::InvalidUrl`] for this URL.
    pub(crate) fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::invalid_url(&self.url, reason)
    }

    /// Whether the query gives `key` (and it was not taken yet).
    pub fn contains(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// Removes and returns the raw value of `key`.
    pub fn take(&mut self, key: &str) -> Option<String> {
        self.values.remove(key)
    }

    /// Removes `key` and parses it as a duration (see [`parse_duration`]).
    pub fn take_duration(&mut self, key: &str) -> Result<Option<Duration>> {
        self.take(key)
            .map(|v| {
                parse_duration(&v).map_err(|reason| {
                    Error::invalid_url(&self.url, format!("option \"{key}\": {reason}"))
                })
            })
            .transpose()
    }

    /// Removes `key` and parses it as a duration that must be more than
    /// zero; `default` when the URL does not give it.
    pub fn take_positive_duration(&mut self, key: &str, default: Duration) -> Result<Duration> {
        match self.take_duration(key)? {
            Some(d) if d.is_zero() => Err(Error::invalid_url(
                &self.url,
                format!("option \"{key}\" must be more than zero"),
            )),
            d => Ok(d.unwrap_or(default)),
        }
    }

    /// Removes `key` and parses it with `FromStr`, naming `expected` on failure.
    pub fn take_parsed<T: std::str::FromStr>(
        &mut self,
        key: &str,
        expected: &str,
    ) -> Result<Option<T>> {
        self.take(key)
            .map(|v| {
                v.parse().map_err(|_| {
                    Error::invalid_url(
                        &self.url,
                        format!("option \"{key}\" must be {expected}, got \"{v}\""),
                    )
                })
            })
            .transpose()
    }

    /// Removes `key` and parses it as `true` or `false`; `default` when the
    /// URL does not give it.
    pub fn take_bool(&mut self, key: &str, default: bool) -> Result<bool> {
        match self.take(key).as_deref() {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(Error::invalid_url(
                &self.url,
                format!("option \"{key}\" must be true or false, got \"{other}\""),
            )),
        }
    }

    /// Fails if any option was not taken, listing the ones that are accepted.
    pub fn finish(self, accepted: &[&str]) -> Result<()> {
        match self.values.keys().next() {
            None => Ok(()),
            Some(unknown) => Err(Error::invalid_url(
                &self.url,
                format!(
                    "unknown option \"{unknown}\"; accepted options: {}",
                    accepted.join(", ")
                ),
            )),
        }
    }
}

/// A URL whose authority is a comma-separated host list
/// (`scheme://h1:p1,h2:p2/path?query`), which the `url` crate cannot parse.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostList<'a> {
    /// Each host as written, credentials included.
    pub hosts: Vec<&'a str>,
    /// What follows the first `/` after the hosts, without it; may be empty.
    pub path: &'a str,
}

impl<'a> HostList<'a> {
    /// Splits `url`, which must start with `scheme://`.
    pub fn parse(url: &'a str, scheme: &str) -> Result<Self> {
        let rest = url
            .strip_prefix(scheme)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(|| {
                Error::invalid_url(url, format!("expected {scheme}://HOST:PORT,HOST:PORT,…"))
            })?;
        let without_query = rest.split_once('?').map_or(rest, |(r, _)| r);
        let (hosts, path) = without_query.split_once('/').unwrap_or((without_query, ""));
        let hosts: Vec<&str> = hosts.split(',').collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(Error::invalid_url(url, "an empty host in the host list"));
        }
        Ok(Self { hosts, path })
    }
}

/// `host` with `default_port` added when it names no port; an empty `host`
/// is an error that shows `example` (`redis://HOST[:PORT]`, say).
pub fn host_with_port(url: &str, host: &str, default_port: u16, example: &str) -> Result<String> {
    if host.is_empty() {
        return Err(Error::invalid_url(url, format!("no host; write {example}")));
    }
    Ok(if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    })
}

/// The user and password of a URL's user-info (`user:password`, `user`
/// or `:password`), percent-decoded; an empty user is none. `url` is for
/// the message.
pub fn userinfo(url: &str, info: &str) -> Result<(Option<String>, Option<String>)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|d| d.into_owned())
            .map_err(|_| Error::invalid_url(url, "credentials are not UTF-8"))
    };
    let (user, password) = info
        .split_once(':')
        .map_or((info, None), |(u, p)| (u, Some(p)));
    Ok((
        (!user.is_empty()).then(|| decode(user)).transpose()?,
        password.map(decode).transpose()?,
    ))
}

/// The check of a server address a config type holds: `host:port` with a
/// port from 0 to 65535, `host` alone, or a bracketed IPv6 address with or
/// without a port; no spaces, `,`, `/`, `@` or `?`. A mistake is an
/// [`Error::InvalidConfig`] of `backend` naming the address.
pub fn check_addr(backend: &'static str, addr: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid_config(
            backend,
            format!("bad server address \"{addr}\": {why}; expected HOST:PORT"),
        ))
    };
    if addr.contains(|c: char| c.is_whitespace() || matches!(c, ',' | '/' | '@' | '?')) {
        return bad("a space, ',', '/', '@' or '?' in it");
    }
    let (host, port) = match addr.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => match port.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return bad("text after the IPv6 address"),
            },
            None => return bad("an unclosed '['"),
        },
        None => match addr.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (addr, None),
        },
    };
    if host.is_empty() {
        return bad("no host");
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return bad("the port is not a number from 0 to 65535");
    }
    Ok(())
}

/// The check every config type makes of its timeouts: each named
/// duration is more than zero, or an [`Error::InvalidConfig`] of `backend`
/// names the first that is not.
pub fn check_positive(backend: &'static str, durations: &[(&str, Duration)]) -> Result<()> {
    match durations.iter().find(|(_, d)| d.is_zero()) {
        Some((option, _)) => Err(Error::invalid_config(
            backend,
            format!("option \"{option}\" must be more than zero"),
        )),
        None => Ok(()),
    }
}

/// The check of a key prefix that is put before every lock key as it is
/// (Redis, Redlock, memcache): at most 64 printable ASCII characters,
/// without spaces or `#`, so that no two names share a key and no lock key
/// is another's fence key. A mistake is an [`Error::InvalidConfig`] of
/// `backend`.
pub fn check_key_prefix(backend: &'static str, prefix: &str) -> Result<()> {
    let printable = |c: char| c.is_ascii_graphic() && c != '#';
    if prefix.len() > 64 || !prefix.chars().all(printable) {
        return Err(Error::invalid_config(
            backend,
            "option \"prefix\" must be at most 64 printable ASCII characters, without spaces or '#'",
        ));
    }
    Ok(())
}

/// For parsers' tests: `parse` refuses each input with a message that
/// contains the reason paired with it.
#[doc(hidden)]
pub fn assert_refused<T: std::fmt::Debug, E: std::fmt::Display>(
    parse: impl Fn(&str) -> std::result::Result<T, E>,
    cases: &[(&str, &str)],
) {
    for (input, why) in cases {
        let err = parse(input).unwrap_err().to_string();
        assert!(err.contains(why), "{input:?}: {err}");
    }
}

/// Parses a duration written as a number and a unit: `ms`, `s`, `m` or `h`
/// (`250ms`, `30s`, `1.5s`, `2m`). A bare number is refused, since seconds and
/// milliseconds are both common and a wrong guess is a silent bug.
///
/// ```
/// use std::time::Duration;
/// use lock_core::url::parse_duration;
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert!(parse_duration("30").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("\"{text}\" has no unit; write e.g. 500ms, 30s, 5m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("\"{text}\" does not start with a number"))?;
    let scale = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "unknown unit \"{unit}\" in \"{text}\"; use ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("\"{text}\" is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_options_are_reported_with_the_accepted_list() {
        let mut q = QueryOptions::parse("sqlite://x?table=t&bogus=1&password=zz").unwrap();
        assert_eq!(q.take("table").as_deref(), Some("t"));
        q.take("password");
        let err = q.finish(&["table"]).unwrap_err().to_string();
        assert!(
            err.contains("\"bogus\"") && err.contains("accepted options: table"),
            "{err}"
        );
        assert!(!err.contains("zz"), "{err}");
    }

    #[test]
    fn duplicate_options_are_rejected() {
        assert!(QueryOptions::parse("x://h?a=1&a=2").is_err());
    }

    #[test]
    fn host_lists_split_hosts_and_path() {
        let l = HostList::parse("etcd://a:1,u:p@b:2/x/y?q=1", "etcd").unwrap();
        assert_eq!(l.hosts, ["a:1", "u:p@b:2"]);
        assert_eq!(l.path, "x/y");
        assert_eq!(HostList::parse("zk://a:1", "zk").unwrap().path, "");
        assert!(HostList::parse("zk://a:1,,b:2", "zk").is_err());
        assert!(HostList::parse("etcd://a:1", "zk").is_err());
    }

    #[test]
    fn durations_need_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "s", "10", "10x", "-1s", "1e400s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
