//! The sweep's chart: one panel per followed metric, the metric (up, log
//! scale) against clients or names (across, log scale), a line per
//! contender.

use super::draw::*;
use std::fmt::Write as _;

use crate::cli::bench::contender::Role;
use crate::cli::bench::report::show_micros;

use crate::cli::bench::report::show;
use crate::cli::bench::sweep::{Series, Sweep};

const COLUMNS: usize = 3;
const GAP: f64 = 40.0;
const HEIGHT: f64 = 170.0;
/// The space for the value labels left of each panel.
const AXIS: f64 = 56.0;

/// The whole chart for one backend's sweep.
pub(crate) fn svg(sweep: &Sweep) -> String {
    let mut out = String::new();
    let mut y = MARGIN + 8.0;
    text(
        &mut out,
        MARGIN,
        y,
        20.0,
        "font-weight=\"bold\"",
        &format!("distlock bench --sweep · {}", sweep.backend),
    );
    y += 22.0;
    text(
        &mut out,
        MARGIN,
        y,
        12.0,
        &format!("fill=\"{MUTED}\""),
        &format!(
            "Each point: {} per backend, contenders taking turns in interleaved slices · log \
             scales · floor dashed",
            show_micros(sweep.duration_ms * 1e3)
        ),
    );
    y += 26.0;
    let mut x = MARGIN;
    for s in &sweep.subjects {
        let c = colour_among(&sweep.subjects, &s.name);
        let dash = if s.role == Role::Floor {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        line(
            &mut out,
            (x, y - 4.0),
            (x + 18.0, y - 4.0),
            &format!("stroke=\"{c}\" stroke-width=\"2\"{dash}"),
        );
        text(&mut out, x + 24.0, y, 11.5, "", &s.name);
        x += 40.0 + 7.0 * s.name.chars().count() as f64;
    }
    y += 18.0;
    let width = (WIDTH - 2.0 * MARGIN - (COLUMNS as f64 - 1.0) * GAP) / COLUMNS as f64;
    for (row, chunk) in sweep.series.chunks(COLUMNS).enumerate() {
        let top = y + row as f64 * (HEIGHT + 60.0);
        for (col, series) in chunk.iter().enumerate() {
            let left = MARGIN + col as f64 * (width + GAP);
            panel(&mut out, sweep, series, (left, top), width);
        }
    }
    y += sweep.series.len().div_ceil(COLUMNS) as f64 * (HEIGHT + 60.0);
    text(
        &mut out,
        MARGIN,
        y,
        11.0,
        &format!("fill=\"{MUTED}\""),
        &format!(
            "Measured {} on {} cores ({} {}), {}. Regenerate: distlock bench --sweep --url URL.",
            sweep.date, sweep.machine.cores, sweep.machine.os, sweep.machine.arch, sweep.url
        ),
    );
    y += MARGIN;
    document(&out, y)
}

fn panel(out: &mut String, sweep: &Sweep, s: &Series, (left, top): (f64, f64), width: f64) {
    text(
        out,
        left,
        top + 12.0,
        12.5,
        "font-weight=\"bold\"",
        &format!("{} · {}", s.workload.id(), s.metric),
    );
    let plot_left = left + AXIS;
    let plot_top = top + 22.0;
    let plot_w = width - AXIS;
    rect(
        out,
        plot_left,
        plot_top,
        plot_w,
        HEIGHT,
        &format!("fill=\"none\" stroke=\"{GRID}\""),
    );
    let xs: Vec<f64> = s.points.iter().map(|p| p.x as f64).collect();
    let (Some(xa), Some(ya)) = (
        LogAxis::new(xs.iter().copied()),
        LogAxis::new(s.points.iter().flat_map(|p| p.values.values().copied())),
    ) else {
        return;
    };
    let gx = |x: f64| plot_left + xa.at(x) * plot_w;
    let gy = |v: f64| plot_top + HEIGHT - ya.at(v) * HEIGHT;
    for v in ya.decades() {
        let y = gy(v);
        line(
            out,
            (plot_left, y),
            (plot_left + plot_w, y),
            &format!("stroke=\"{GRID}\""),
        );
        text(
            out,
            plot_left - 5.0,
            y + 4.0,
            10.0,
            &format!("text-anchor=\"end\" fill=\"{MUTED}\""),
            &show(s.unit, v),
        );
    }
    for x in &xs {
        text(
            out,
            gx(*x),
            plot_top + HEIGHT + 14.0,
            10.0,
            &format!("text-anchor=\"middle\" fill=\"{MUTED}\""),
            &x.to_string(),
        );
    }
    text(
        out,
        plot_left + plot_w,
        plot_top + HEIGHT + 28.0,
        10.0,
        &format!("text-anchor=\"end\" fill=\"{MUTED}\""),
        s.varies,
    );
    for subject in &sweep.subjects {
        let pts: Vec<String> = s
            .points
            .iter()
            .filter_map(|p| {
                let v = p.values.get(&subject.name).filter(|v| **v > 0.0)?;
                Some(format!("{:.1},{:.1}", gx(p.x as f64), gy(*v)))
            })
            .collect();
        if pts.is_empty() {
            continue;
        }
        let dash = if subject.role == Role::Floor {
            " stroke-dasharray=\"5 3\""
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            pts.join(" "),
            colour_among(&sweep.subjects, &subject.name)
        );
    }
}
