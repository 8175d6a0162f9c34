//! `distlock status`: who holds a lock, a semaphore's permits, or a
//! read-write lock.

use distlock::{Holder, LockKind, LockName, Result};
use serde::Serialize;

use super::args::StatusArgs;
use super::exit;

pub(crate) async fn status(args: StatusArgs) -> Result<u8> {
    let locker = distlock::connect(&args.backend.url).await?;
    let name = LockName::new(&args.backend.name)?;
    let held = match (args.permits, args.read_write) {
        (Some(permits), _) => {
            let holders = locker.semaphore(name.as_str(), permits).holders().await?;
            let kind = LockKind::permit(permits);
            print(
                &args,
                || group_text(&name, kind, &holders),
                || group_json(&name, kind, &holders),
            );
            // Busy as a try would find it: every permit taken.
            holders.len() >= permits as usize
        }
        (None, true) => {
            let holders = locker.rwlock(name.as_str()).holders().await?;
            let kind = LockKind::Read;
            print(
                &args,
                || group_text(&name, kind, &holders),
                || group_json(&name, kind, &holders),
            );
            !holders.is_empty()
        }
        (None, false) => {
            let holder = locker.holder(&name).await?;
            print(
                &args,
                || text(&name, holder.as_ref()),
                || json(&name, holder.as_ref()),
            );
            holder.is_some()
        }
    };
    Ok(if held { exit::BUSY } else { 0 })
}

fn print(args: &StatusArgs, text: impl FnOnce() -> String, json: impl FnOnce() -> String) {
    if args.json {
        println!("{}", json());
    } else {
        println!("{}", text());
    }
}

/// "by owner 3f2a9c1b… with fencing token 42, expires in 27.5s unless
/// renewed": one holder, in words.
fn described(h: &Holder) -> String {
    let expiry = h
        .expires_in
        .map(|d| format!(", expires in {:.1}s unless renewed", d.as_secs_f64()))
        .unwrap_or_default();
    let token = h
        .token
        .map(|t| format!(" with fencing token {t}"))
        .unwrap_or_default();
    format!("owner {}…{token}{expiry}", h.owner)
}

fn text(name: &LockName, holder: Option<&Holder>) -> String {
    match holder {
        None => format!("lock \"{name}\" is free"),
        Some(h) => format!("lock \"{name}\" is held by {}", described(h)),
    }
}

fn group_text(name: &LockName, kind: LockKind, holders: &[Holder]) -> String {
    let what = match kind {
        LockKind::Permit { permits } => format!("semaphore \"{name}\" ({permits} permits)"),
        _ => format!("read-write lock \"{name}\""),
    };
    if holders.is_empty() {
        return format!("{what} is free");
    }
    let mut lines = vec![format!("{what} is held by {}:", holders.len())];
    for h in holders {
        lines.push(format!("  {}: {}", side(h.kind), described(h)));
    }
    lines.join("\n")
}

/// What a holder holds, in a word.
fn side(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Read => "read",
        LockKind::Write => "write",
        LockKind::Permit { .. } => "permit",
        _ => "lock",
    }
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

fn millis(h: &Holder) -> Option<u64> {
    h.expires_in
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn json(name: &LockName, holder: Option<&Holder>) -> String {
    let status = Status {
        name: name.as_str(),
        held: holder.is_some(),
        owner: holder.map(|h| h.owner.as_str()),
        token: holder.and_then(|h| h.token).map(|t| t.get()),
        expires_in_ms: holder.and_then(millis),
    };
    serde_json::to_string(&status).expect("a struct of strings and numbers serializes")
}

/// `status --permits N --json` and `--read-write --json`.
#[derive(Serialize)]
struct GroupStatus<'a> {
    name: &'a str,
    kind: &'static str,
    permits: Option<u32>,
    held: bool,
    holders: Vec<GroupHolder<'a>>,
}

#[derive(Serialize)]
struct GroupHolder<'a> {
    owner: &'a str,
    token: Option<u64>,
    expires_in_ms: Option<u64>,
    side: &'static str,
}

fn group_json(name: &LockName, kind: LockKind, holders: &[Holder]) -> String {
    let (kind, permits) = match kind {
        LockKind::Permit { permits } => ("semaphore", Some(permits)),
        _ => ("read-write", None),
    };
    let status = GroupStatus {
        name: name.as_str(),
        kind,
        permits,
        held: !holders.is_empty(),
        holders: holders
            .iter()
            .map(|h| GroupHolder {
                owner: &h.owner,
                token: h.token.map(|t| t.get()),
                expires_in_ms: millis(h),
                side: side(h.kind),
            })
            .collect(),
    };
    serde_json::to_string(&status).expect("a struct of strings and numbers serializes")
}
