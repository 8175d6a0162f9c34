//! Turns the figures the fault suite appended to a JSON-lines file (see
//! `DISTLOCK_RELIABILITY_OUT`) into docs/RELIABILITY.md and
//! docs/reliability.json.
//!
//! Usage: `reliability-report FIGURES.jsonl DOCS_DIR COMMAND`

use std::fmt::Write as _;
use std::process::Command;

use distlock_torture::Figures;
use serde_json::Value;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, docs, command] = args.as_slice() else {
        return Err("usage: reliability-report FIGURES.jsonl DOCS_DIR COMMAND".into());
    };
    let runs: Vec<Value> = std::fs::read_to_string(input)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let date = output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let machine = machine();
    let json = serde_json::json!({
        "date": date,
        "machine": machine,
        "command": command,
        "runs": runs,
    });
    std::fs::write(format!("{docs}/reliability.json"), format!("{json:#}\n"))?;
    std::fs::write(
        format!("{docs}/RELIABILITY.md"),
        page(&runs, &date, &machine, command)?,
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
            .flat_map(|(r, _)| {
                let claim = &r["claim"];
                let fault = r["fault"].as_str().unwrap_or("?").to_owned();
                [
                    "unsafe_overlaps",
                    "stale_writes_accepted",
                    "token_order_violations",
                    "lost_writes",
                ]
                .into_iter()
                .filter(move |k| claim[*k] == "Possible")
                .map(move |k| format!("`{fault}`: {}", k.replace('_', " ")))
            })
            .collect();
        if possible.is_empty() {
            page.push_str("\nThe README claims 0 for every figure above.\n\n");
        } else {
            let _ = writeln!(
                page,
                "\nThe README claims 0 for every figure above except (`possible`): {}.\n",
                possible.join("; ")
            );
        }
    }
    Ok(page)
}

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
