//! The chart's second part: each workload's latency percentiles as lines,
//! one panel per workload.

use super::draw::*;
use std::fmt::Write as _;

use crate::cli::bench::contender::Role;
use crate::cli::bench::report::Report;

use crate::cli::bench::report::WorkloadReport;
use crate::cli::bench::workload::Run;

/// Maps a percentile to the x of a "nines" axis, on which 90, 99 and 99.9
/// are evenly spaced, so the tail is as visible as the median.
fn nines(p: f64) -> f64 {
    -(1.0 - p / 100.0).max(1e-3).log10()
}

const PANEL_COLUMNS: usize = 3;
const PANEL_GAP: f64 = 34.0;
const PANEL_HEIGHT: f64 = 170.0;
/// The space for the latency labels left of each panel.
const PANEL_AXIS: f64 = 48.0;

pub(super) fn latency_curves(out: &mut String, report: &Report, y: &mut f64) {
    let panels: Vec<_> = report
        .workloads
        .iter()
        .filter(|w| w.runs.iter().any(|r| r.latency.is_some()))
        .collect();
    if panels.is_empty() {
        return;
    }
    text(
        out,
        MARGIN,
        *y,
        15.0,
        "font-weight=\"bold\"",
        "Latency by percentile (log scale)",
    );
    *y += 18.0;
    text(
        out,
        MARGIN,
        *y,
        11.5,
        &format!("fill=\"{MUTED}\""),
        "Each line: one contender's latency (up) at each percentile (across), up to p99.9.",
    );
    *y += 14.0;
    legend(out, report, y, false);
    *y += 14.0;
    let columns = PANEL_COLUMNS as f64;
    let width = (WIDTH - 2.0 * MARGIN - (columns - 1.0) * PANEL_GAP) / columns;
    for (row, chunk) in panels.chunks(PANEL_COLUMNS).enumerate() {
        let top = *y + row as f64 * (PANEL_HEIGHT + 58.0);
        for (col, w) in chunk.iter().enumerate() {
            let left = MARGIN + col as f64 * (width + PANEL_GAP);
            panel(out, report, w, (left, top), width);
        }
    }
    let rows = panels.len().div_ceil(PANEL_COLUMNS) as f64;
    *y += rows * (PANEL_HEIGHT + 58.0);
}

fn panel(
    out: &mut String,
    report: &Report,
    w: &WorkloadReport,
    (left, top): (f64, f64),
    width: f64,
) {
    text(
        out,
        left,
        top + 12.0,
        12.5,
        "font-weight=\"bold\"",
        w.workload.id(),
    );
    text(
        out,
        left + width,
        top + 12.0,
        11.0,
        &format!("text-anchor=\"end\" fill=\"{MUTED}\""),
        w.latency,
    );
    let plot_left = left + PANEL_AXIS;
    let plot_top = top + 22.0;
    let plot_w = width - PANEL_AXIS;
    let points = |r: &Run| -> Vec<[f64; 2]> {
        r.latency.as_ref().map_or_else(Vec::new, |d| {
            d.curve.iter().copied().filter(|p| p[0] <= 99.9).collect()
        })
    };
    let axis = LogAxis::new(
        w.runs
            .iter()
            .flat_map(|r| points(r).into_iter().map(|p| p[1])),
    )
    // No latency above 0 µs, nothing a log scale can place: one decade
    // from 1 µs.
    .unwrap_or(LogAxis { lo: 0.0, hi: 1.0 });
    let ly = |us: f64| plot_top + PANEL_HEIGHT - axis.at(us) * PANEL_HEIGHT;
    let lx = |p: f64| plot_left + nines(p) / 3.0 * plot_w;
    rect(
        out,
        plot_left,
        plot_top,
        plot_w,
        PANEL_HEIGHT,
        &format!("fill=\"none\" stroke=\"{GRID}\""),
    );
    for v in axis.decades() {
        let gy = ly(v);
        line(
            out,
            (plot_left, gy),
            (plot_left + plot_w, gy),
            &format!("stroke=\"{GRID}\""),
        );
        text(
            out,
            plot_left - 5.0,
            gy + 4.0,
            10.0,
            &format!("text-anchor=\"end\" fill=\"{MUTED}\""),
            &decade_label(v),
        );
    }
    for (p, label) in [
        (0.0, "p0"),
        (50.0, "p50"),
        (90.0, "p90"),
        (99.0, "p99"),
        (99.9, "p99.9"),
    ] {
        let gx = lx(p);
        line(
            out,
            (gx, plot_top),
            (gx, plot_top + PANEL_HEIGHT),
            &format!("stroke=\"{GRID}\""),
        );
        text(
            out,
            gx,
            plot_top + PANEL_HEIGHT + 14.0,
            10.0,
            &format!("text-anchor=\"middle\" fill=\"{MUTED}\""),
            label,
        );
    }
    for r in &w.runs {
        let pts = points(r);
        if pts.is_empty() {
            continue;
        }
        let path: Vec<String> = pts
            .iter()
            .map(|p| format!("{:.1},{:.1}", lx(p[0]), ly(p[1])))
            .collect();
        let is_floor = report
            .subjects
            .iter()
            .any(|s| s.role == Role::Floor && s.name == r.subject);
        let dash = if is_floor {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            path.join(" "),
            colour(report, &r.subject)
        );
    }
}

/// `1 µs`, `10 ms`, `1 s`: a power of ten of microseconds.
fn decade_label(us: f64) -> String {
    match us {
        v if v >= 1e6 => format!("{} s", v / 1e6),
        v if v >= 1e3 => format!("{} ms", v / 1e3),
        v if v >= 1.0 => format!("{v} µs"),
        v => format!("{} ns", v * 1e3),
    }
}
