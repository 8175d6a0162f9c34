//! Secrets out of URLs before they are shown: what errors, `Debug` and
//! logs print. Depends on nothing else in the crate, so errors can use it.

/// Query keys whose values are secrets and never shown.
const SECRET_KEYS: &[&str] = &["password", "pass", "secret", "token", "auth", "sslpassword"];

/// Returns `url` with the password of its user-info and the values of secret
/// query options replaced by `***`, so it can be logged or shown.
///
/// ```
/// assert_eq!(
///     lock_core::url::redact("redis://app:s3cret@127.0.0.1:6379/0?password=x&ttl=5s"),
///     "redis://app:***@127.0.0.1:6379/0?password=***&ttl=5s"
/// );
/// ```
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = redact_userinfo(base);
    if let Some(query) = query {
        out.push('?');
        let parts: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if SECRET_KEYS.contains(&k.to_ascii_lowercase().as_str()) => {
                    format!("{k}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&parts.join("&"));
    }
    out
}

fn redact_userinfo(base: &str) -> String {
    let Some((scheme, rest)) = base.split_once("://") else {
        return base.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let hidden = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            format!("{scheme}://{hidden}@{hosts}{path}")
        }
        None => base.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password_and_secret_options() {
        assert_eq!(redact("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("postgres://u:p@h:5/db?a=1"),
            "postgres://u:***@h:5/db?a=1"
        );
        assert_eq!(
            redact("etcd://h1:1,h2:2?user=u&password=p"),
            "etcd://h1:1,h2:2?user=u&password=***"
        );
        assert_eq!(redact("redis://:p@h"), "redis://:***@h");
    }
}
