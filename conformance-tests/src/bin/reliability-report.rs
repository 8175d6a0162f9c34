//! Turns the figures the fault suite appended to a JSON-lines file (see
//! `DISTLOCK_RELIABILITY_OUT`) into docs/RELIABILITY.md and
//! docs/reliability.json.
//!
//! Usage: `reliability-report FIGURES.jsonl DOCS_DIR COMMAND`, or
//! `reliability-report docs/reliability.json DOCS_DIR -` to write the page
//! again from published figures, with their own date, machine and command.

use std::fmt::Write as _;
use std::process::Command;

use distlock_torture::Figures;
use serde_json::Value;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, docs, command] = args.as_slice() else {
        return Err("usage: reliability-report FIGURES.jsonl DOCS_DIR COMMAND".into());
    };
    let text = std::fs::read_to_string(input)?;
    let (runs, date, machine, command) = match serde_json::from_str::<Value>(&text) {
        Ok(published) if published["runs"].is_array() => (
            published["runs"].as_array().cloned().unwrap_or_default(),
            published["date"].as_str().unwrap_or_default().to_owned(),
            published["machine"].as_str().unwrap_or_default().to_owned(),
            published["command"].as_str().unwrap_or_default().to_owned(),
        ),
        _ => (
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str)
                .collect::<Result<Vec<Value>, _>>()?,
            output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            machine(),
            command.clone(),
        ),
    };
    let json = serde_json::json!({
        "date": date,
        "machine": machine,
        "command": command,
        "runs": runs,
    });
    std::fs::write(format!("{docs}/reliability.json"), format!("{json:#}\n"))?;
    std::fs::write(
        format!("{docs}/RELIABILITY.md"),
        page(&runs, &date, &machine, &command)?,
    )?;
    Ok(())
}

fn page(runs: &[Value], date: &str, machine: &str, command: &str) -> Result<String, String> {
    let mut backends: Vec<&str> = Vec::new();
    for run in runs {
        let backend = run["backend"].as_str().ok_or("a run without a backend")?;
        if !backends.contains(&backend) {
            backends.push(backend);
        }
    }
    let mut page = String::from(HEADER);
    let _ = writeln!(
        page,
        "Measured {date} on {machine}, with `{command}`. The same figures as \
         JSON: [reliability.json](reliability.json).\n"
    );
    for backend in backends {
        let rows: Vec<(&Value, Figures)> = runs
            .iter()
            .filter(|r| r["backend"] == backend)
            .map(|r| {
                Ok((
                    r,
                    serde_json::from_value(r["figures"].clone()).map_err(|e| e.to_string())?,
                ))
            })
            .collect::<Result<_, String>>()?;
        let first = rows[0].0;
        let _ = writeln!(
            page,
            "## {backend}\n\n{} clients, TTL {} ms, each fault {} ms, each row {:.1} s.\n",
            first["clients"],
            first["ttl_ms"],
            first["fault_ms"],
            first["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0
        );
        let labels: Vec<String> = rows
            .iter()
            .map(|(r, _)| r["fault"].as_str().unwrap_or("?").to_owned())
            .collect();
        page.push_str(&distlock_torture::report::table(
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
        if possible.is_empty() {
            page.push_str("\nThe README claims 0 for every figure above.\n\n");
        } else {
            let _ = writeln!(
                page,
                "\nThe README claims 0 for every figure above except these, which it \
                 calls `possible`: {}.\n",
                possible.join("; ")
            );
        }
    }
    Ok(page)
}

/// The figures a README claims, by their JSON key and their name.
const CLAIMED: [(&str, &str); 4] = [
    ("unsafe_overlaps", "unsafe overlaps"),
    ("stale_writes_accepted", "stale writes accepted"),
    ("token_order_violations", "token-order violations"),
    ("lost_writes", "lost writes"),
];

const HEADER: &str = "\
# Reliability under faults

What every backend does to a fenced resource when clients pause or die,
servers crash or freeze, networks stall, and cluster members fail —
measured, not asserted. Each backend's README has an `Under faults` table
with its claims; `./scripts/test` runs every row for one fault and fails if
a claim breaks, and `./scripts/reliability` re-measures this page.

**Method.** Worker processes (4 per run) take one lock over and over. Each
holder reads a *fenced register* — a file outside the lock service that
serves a read or a write only if the holder's fencing token is at least the
highest it has seen — holds for up to a fifth of the TTL, writes back the
value plus one, and releases. Every step goes to one history file stamped
with `CLOCK_MONOTONIC`, shared by every process on the host. A nemesis
applies its fault for 2×TTL after each quiet TTL. The checker then counts:

- **unsafe overlaps** — critical sections (grant to release, as the client
  saw them) overlapping while both holders' own lease deadlines were ahead:
  a broken promise of mutual exclusion;
- **stale writes accepted** — writes the register took after a holder
  granted later had already read it: a broken fence;
- **stale writes rejected** — the fence doing its job;
- **token-order violations** — grants whose token is not above every token
  granted before their acquire started;
- **lost writes** — accepted writes missing from the register's final value;
- **recovery ms** — the longest time from the end of a fault to the next
  grant; **lost signals** — holders told their lock was lost;
- **errors** — failed acquires and releases by kind (a wait that ran out
  while a server was down is an error, not a broken promise).

**Reading a `possible` cell that shows 0.** It was not seen in this
workload, which is not the same as impossible: holders keep the lock for a
fifth of the TTL, all processes and servers share one host and its clock,
and a fault lasts two TTLs. Each backend's README says what it takes to
break such a cell, and where a deterministic test reproduces it (Redlock's
double grant after an early expiry or an immediate restart is set up on
purpose in `conformance-tests/tests/redlock.rs`).

";

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
