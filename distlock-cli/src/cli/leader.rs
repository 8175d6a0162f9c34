//! `distlock leader`: who leads an election, or each change as it happens.

use std::io::Write;
use std::time::Duration;

use distlock::{Error, Leader, LockName, Result};
use serde::Serialize;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::args::LeaderArgs;
use super::exit;
use super::show::human;

/// How long `--watch` waits before reading again after the store failed.
const RETRY: Duration = Duration::from_secs(1);

pub(crate) async fn leader(args: LeaderArgs) -> Result<u8> {
    let locker = distlock::connect(&args.backend.url).await?;
    let name = LockName::new(&args.backend.name)?;
    let election = locker.election(name.as_str());
    if !args.watch {
        let leader = election.leader().await?;
        println!("{}", shown(&args, &name, leader.as_ref()));
        // As `status` does: busy as a try (to campaign) would find it.
        return Ok(if leader.is_some() { exit::BUSY } else { 0 });
    }
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    let mut watch = election.observe();
    let mut first = true;
    loop {
        let changed = tokio::select! {
            changed = watch.changed() => changed,
            () = received(&mut interrupt) => return Ok(0),
            () = received(&mut terminate) => return Ok(0),
        };
        match changed {
            Ok(leader) => {
                first = false;
                let line = shown(&args, &name, leader.as_ref());
                if let Err(e) = writeln!(std::io::stdout().lock(), "{line}") {
                    // Whoever read the changes has gone (`| head -1`).
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        return Ok(0);
                    }
                    eprintln!("distlock: writing to stdout: {e}");
                    return Ok(exit::INTERNAL);
                }
            }
            // Mistakes (a backend without elections) show at once; a store
            // that fails later may come back.
            Err(
                e @ (Error::Unavailable { .. } | Error::Timeout { .. } | Error::Backend { .. }),
            ) if !first => {
                eprintln!(
                    "distlock: {e}; reading the leader again in {}",
                    human(RETRY)
                );
                tokio::select! {
                    () = tokio::time::sleep(RETRY) => {}
                    () = received(&mut interrupt) => return Ok(0),
                    () = received(&mut terminate) => return Ok(0),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

async fn received(signals: &mut Option<Signal>) {
    match signals {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

fn shown(args: &LeaderArgs, name: &LockName, leader: Option<&Leader>) -> String {
    if args.json {
        json(name, leader)
    } else {
        text(name, leader)
    }
}

/// `election "scheduler" is led by "web-1:4242" (term 42, owner 3f2a9c1b…,
/// expires in 27.5s unless renewed)`.
fn text(name: &LockName, leader: Option<&Leader>) -> String {
    let Some(l) = leader else {
        return format!("election \"{name}\" has no leader");
    };
    let mut about = vec![format!("term {}", l.term)];
    if !l.owner.is_empty() {
        about.push(format!("owner {}…", l.owner));
    }
    if let Some(d) = l.expires_in {
        about.push(format!("expires in {} unless renewed", human(d)));
    }
    format!(
        "election \"{name}\" is led by {:?} ({})",
        l.value,
        about.join(", ")
    )
}

/// `leader --json`: every field is always present, `null` where unknown or
/// while nobody leads, so a script reads one shape.
#[derive(Serialize)]
struct Shown<'a> {
    name: &'a str,
    led: bool,
    value: Option<&'a str>,
    term: Option<u64>,
    owner: Option<&'a str>,
    expires_in_ms: Option<u64>,
}

fn json(name: &LockName, leader: Option<&Leader>) -> String {
    let shown = Shown {
        name: name.as_str(),
        led: leader.is_some(),
        value: leader.map(|l| l.value.as_str()),
        term: leader.map(|l| l.term.get()),
        owner: leader.map(|l| l.owner.as_str()).filter(|o| !o.is_empty()),
        expires_in_ms: leader
            .and_then(|l| l.expires_in)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    };
    serde_json::to_string(&shown).expect("a struct of strings and numbers serializes")
}
