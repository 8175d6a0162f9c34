//! Turns the figures the fault suite appended to a JSON-lines file (see
//! `DISTLOCK_RELIABILITY_OUT`) into docs/RELIABILITY.md and
//! docs/reliability.json.
//!
//! Usage: `reliability-report FIGURES.jsonl DOCS_DIR COMMAND [--merge]`.
//! Each run in FIGURES is stamped with the date, this machine and COMMAND
//! (unless it has a stamp already).
//! Without `--merge` they are the whole page; with it, they replace the
//! runs of the same backend, fault and lock in DOCS_DIR/reliability.json
//! and every other run stays, with its own stamp. `reliability-report
//! docs/reliability.json DOCS_DIR -` writes the page again from published
//! figures.

use std::fmt::Write as _;
use std::process::Command;

use distlock_torture::{Figures, Lock};
use serde_json::Value;

/// The page's opening: what is measured and how.
const METHOD: &str = include_str!("method.md");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (input, docs, command, merge) = match args.as_slice() {
        [input, docs, command] => (input, docs, command, false),
        [input, docs, command, flag] if flag == "--merge" => (input, docs, command, true),
        _ => {
            return Err(
                "usage: reliability-report FIGURES.jsonl DOCS_DIR COMMAND [--merge]".into(),
            );
        }
    };
    let text = std::fs::read_to_string(input)?;
    let mut runs = match serde_json::from_str::<Value>(&text) {
        Ok(published) if published["runs"].is_array() => published_runs(&published),
        _ => {
            let stamp = serde_json::json!({
                "date": output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
                "machine": machine(),
                "command": command,
            });
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    let mut run: Value = serde_json::from_str(l)?;
                    if run["measured"].is_null() {
                        run["measured"] = stamp.clone();
                    }
                    Ok(run)
                })
                .collect::<Result<Vec<Value>, serde_json::Error>>()?
        }
    };
    if merge {
        let path = format!("{docs}/reliability.json");
        let published: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        // The new runs take the places of the ones they replace; a new row
        // comes after its backend's, or at the end.
        let mut fresh: Vec<Option<Value>> = runs.into_iter().map(Some).collect();
        let mut merged: Vec<Value> = published_runs(&published)
            .into_iter()
            .map(|old| {
                let new = fresh
                    .iter_mut()
                    .find(|new| new.as_ref().is_some_and(|new| same_row(&old, new)));
                new.and_then(Option::take).unwrap_or(old)
            })
            .collect();
        for run in fresh.into_iter().flatten() {
            let at = merged
                .iter()
                .rposition(|k| k["backend"] == run["backend"])
                .map_or(merged.len(), |i| i + 1);
            merged.insert(at, run);
        }
        runs = merged;
    }
    let json = serde_json::json!({ "runs": runs });
    std::fs::write(format!("{docs}/reliability.json"), format!("{json:#}\n"))?;
    std::fs::write(format!("{docs}/RELIABILITY.md"), page(&runs)?)?;
    Ok(())
}

/// The runs of a published reliability.json, each with its stamp (files
/// written before runs carried their own have one for all of them).
fn published_runs(published: &Value) -> Vec<Value> {
    let shared = serde_json::json!({
        "date": published["date"],
        "machine": published["machine"],
        "command": published["command"],
    });
    let mut runs = published["runs"].as_array().cloned().unwrap_or_default();
    for run in &mut runs {
        if run["measured"].is_null() {
            run["measured"] = shared.clone();
        }
    }
    runs
}

/// A run's lock; runs from before the other locks were measured are the
/// mutex's.
fn lock_of(run: &Value) -> Result<Lock, String> {
    run["lock"].as_str().map_or(Ok(Lock::Mutex), Lock::from_arg)
}

fn same_row(a: &Value, b: &Value) -> bool {
    a["backend"] == b["backend"]
        && a["fault"] == b["fault"]
        && lock_of(a).ok().map(Lock::label) == lock_of(b).ok().map(Lock::label)
}

fn page(runs: &[Value]) -> Result<String, String> {
    let mut backends: Vec<&str> = Vec::new();
    for run in runs {
        let backend = run["backend"].as_str().ok_or("a run without a backend")?;
        if !backends.contains(&backend) {
            backends.push(backend);
        }
    }
    let mut page = String::from(METHOD);
    page.push_str(
        "Each section says when, on what and with which command its rows were \
         measured. The same figures as JSON: [reliability.json](reliability.json).\n\n",
    );
    for backend in backends {
        let of_backend: Vec<&Value> = runs.iter().filter(|r| r["backend"] == backend).collect();
        let mut stamps: Vec<String> = Vec::new();
        for r in &of_backend {
            let m = &r["measured"];
            let stamp = format!(
                "{} on {}, with `{}`",
                m["date"].as_str().unwrap_or("?"),
                m["machine"].as_str().unwrap_or("?"),
                m["command"].as_str().unwrap_or("?")
            );
            if !stamps.contains(&stamp) {
                stamps.push(stamp);
            }
        }
        let first = of_backend[0];
        let _ = writeln!(
            page,
            "## {backend}\n\nMeasured {}. {} clients per lock, TTL {} ms, each fault {} ms, \
             each row {:.1} s.\n",
            stamps.join("; and "),
            first["clients"],
            first["ttl_ms"],
            first["fault_ms"],
            first["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0
        );
        let mut locks: Vec<Lock> = Vec::new();
        for r in &of_backend {
            let lock = lock_of(r)?;
            if !locks.contains(&lock) {
                locks.push(lock);
            }
        }
        for lock in locks {
            let rows: Vec<(&Value, Figures)> = of_backend
                .iter()
                .filter(|r| lock_of(r).ok() == Some(lock))
                .map(|r| {
                    Ok((
                        *r,
                        serde_json::from_value(r["figures"].clone()).map_err(|e| e.to_string())?,
                    ))
                })
                .collect::<Result<_, String>>()?;
            let _ = writeln!(page, "### {lock}\n");
            lock_table(&mut page, lock, &rows);
        }
    }
    Ok(page)
}

/// One lock's table, and which of its cells the README calls `possible`.
fn lock_table(page: &mut String, lock: Lock, rows: &[(&Value, Figures)]) {
    let labels: Vec<String> = rows
        .iter()
        .map(|(r, _)| r["fault"].as_str().unwrap_or("?").to_owned())
        .collect();
    page.push_str(&distlock_torture::report::table(
        lock,
        labels
            .iter()
            .map(String::as_str)
            .zip(rows.iter().map(|(_, f)| f)),
    ));
    let possible: Vec<String> = rows
        .iter()
        .filter_map(|(r, _)| {
            let claim = &r["claim"];
            let figures: Vec<&str> = CLAIMED
                .into_iter()
                .filter(|(key, _)| claim[*key] == "Possible")
                .map(|(_, words)| words)
                .collect();
            (!figures.is_empty()).then(|| {
                format!(
                    "`{}`: {}",
                    r["fault"].as_str().unwrap_or("?"),
                    figures.join(", ")
                )
            })
        })
        .collect();
    let measured = if lock.fenced() {
        "every figure above"
    } else {
        "every figure above but the register's (`–`: a semaphore's holders do not use it)"
    };
    if possible.is_empty() {
        let _ = writeln!(page, "\nThe README claims 0 for {measured}.\n");
    } else {
        let _ = writeln!(
            page,
            "\nThe README claims 0 for {measured} except these, which it calls `possible`: {}.\n",
            possible.join("; ")
        );
    }
}

/// The figures a README claims, by their JSON key and their name.
const CLAIMED: [(&str, &str); 5] = [
    ("unsafe_overlaps", "unsafe overlaps"),
    ("stale_writes_accepted", "stale writes accepted"),
    ("token_order_violations", "token-order violations"),
    ("lost_writes", "lost writes"),
    ("leaked_permits", "leaked permits"),
];

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, m)| m.trim().to_owned())
            })
        })
        .unwrap_or_else(|| "an unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kb: u64 = m.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb / 1024 / 1024)
        })
        .unwrap_or(0);
    format!(
        "{cores} cores ({cpu}), {memory} GiB, {}",
        output("uname", &["-sr"])
    )
}
