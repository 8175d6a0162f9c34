//! `distlock status`: who holds a lock.

use distlock::{Holder, LockName, Result};
use serde::Serialize;

use super::args::StatusArgs;
use super::exit;

pub(crate) async fn status(args: StatusArgs) -> Result<u8> {
    let locker = distlock::connect(&args.backend.url).await?;
    let name = LockName::new(&args.backend.name)?;
    let holder = locker.holder(&name).await?;
    if args.json {
        println!("{}", json(&name, holder.as_ref()));
    } else {
        println!("{}", text(&name, holder.as_ref()));
    }
    Ok(if holder.is_some() { exit::BUSY } else { 0 })
}

fn text(name: &LockName, holder: Option<&Holder>) -> String {
    let Some(h) = holder else {
        return format!("lock \"{name}\" is free");
    };
    let expiry = h
        .expires_in
        .map(|d| format!(", expires in {:.1}s unless renewed", d.as_secs_f64()))
        .unwrap_or_default();
    let token = h
        .token
        .map(|t| format!(" with fencing token {t}"))
        .unwrap_or_default();
    format!(
        "lock \"{name}\" is held by owner {}…{token}{expiry}",
        h.owner
    )
}

/// `status --json`: every field is always present, `null` where unknown or
/// free, so a script reads one shape.
#[derive(Serialize)]
struct Status<'a> {
    name: &'a str,
    held: bool,
    owner: Option<&'a str>,
    token: Option<u64>,
    expires_in_ms: Option<u64>,
}

fn json(name: &LockName, holder: Option<&Holder>) -> String {
    let status = Status {
        name: name.as_str(),
        held: holder.is_some(),
        owner: holder.map(|h| h.owner.as_str()),
        token: holder.and_then(|h| h.token).map(|t| t.get()),
        expires_in_ms: holder
            .and_then(|h| h.expires_in)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    };
    serde_json::to_string(&status).expect("a struct of strings and numbers serializes")
}
