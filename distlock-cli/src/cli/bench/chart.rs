//! The chart, as hand-written SVG: each metric's ratio to the floor as bars
//! on a log scale, then each workload's latency percentiles as lines.

use std::fmt::Write as _;

use super::contender::Role;
use super::report::{Better, Report, show_micros, show_ratio};

const WIDTH: f64 = 960.0;
const MARGIN: f64 = 30.0;
/// Where the bars' plot area starts; the row labels sit left of it.
const BARS_LEFT: f64 = 290.0;
const BARS_RIGHT: f64 = WIDTH - 70.0;
const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
const INK: &str = "#222";
const MUTED: &str = "#666";
const GRID: &str = "#ddd";
const BETTER_SIDE: &str = "#e6f4e6";
/// The floor's line is dashed grey; the others take these colours in order.
const COLOURS: &[&str] = &["#2f6db5", "#b5462f", "#8a4fb5", "#2f9e8f"];
const FLOOR_COLOUR: &str = "#555";

/// The whole chart for one report.
pub(crate) fn svg(report: &Report) -> String {
    let mut out = String::new();
    let mut y = MARGIN;
    title(&mut out, report, &mut y);
    ratio_bars(&mut out, report, &mut y);
    latency_curves(&mut out, report, &mut y);
    footer(&mut out, report, &mut y);
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" \
         viewBox=\"0 0 {WIDTH} {h}\" font-family=\"{FONT}\" fill=\"{INK}\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{out}</svg>\n",
        h = y.ceil()
    )
}

/// The colour of a contender's bars and lines.
fn colour(report: &Report, subject: &str) -> &'static str {
    report
        .subjects
        .iter()
        .filter(|s| s.role != Role::Floor)
        .position(|s| s.name == subject)
        .map_or(FLOOR_COLOUR, |i| COLOURS[i % COLOURS.len()])
}

fn text(out: &mut String, x: f64, y: f64, size: f64, attrs: &str, body: &str) {
    let _ = writeln!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\" {attrs}>{}</text>",
        escape(body)
    );
}

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), attrs: &str) {
    let _ = writeln!(
        out,
        "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" {attrs}/>"
    );
}

fn rect(out: &mut String, x: f64, y: f64, w: f64, h: f64, attrs: &str) {
    let _ = writeln!(
        out,
        "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" {attrs}/>"
    );
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn title(out: &mut String, report: &Report, y: &mut f64) {
    *y += 8.0;
    text(
        out,
        MARGIN,
        *y,
        20.0,
        "font-weight=\"bold\"",
        &format!("distlock bench · {}", report.backend),
    );
    *y += 22.0;
    let s = &report.settings;
    text(
        out,
        MARGIN,
        *y,
        12.0,
        &format!("fill=\"{MUTED}\""),
        &format!(
            "{} clients · {} names · {} per contender and workload in {} interleaved slices · \
             TTL {} · floor = the backend's bare primitive, same run",
            s.clients,
            s.names,
            show_micros(s.share_ms * 1e3),
            s.slices,
            show_micros(s.ttl_ms * 1e3),
        ),
    );
    *y += 30.0;
}

/// The ratio axis: symmetric around 1 on a log scale, wide enough for the
/// most extreme ratio.
struct RatioAxis {
    span: f64,
}

impl RatioAxis {
    fn new(ratios: impl Iterator<Item = f64>) -> Self {
        let widest = ratios
            .filter(|r| *r > 0.0)
            .map(|r| r.log10().abs())
            .fold(0.0_f64, f64::max);
        let span = [2.0_f64, 5.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]
            .into_iter()
            .find(|d| d.log10() >= widest * 1.02)
            .unwrap_or(1e6);
        Self { span }
    }

    fn x(&self, ratio: f64) -> f64 {
        let lo = -self.span.log10();
        let at = ratio.clamp(1.0 / self.span, self.span).log10();
        BARS_LEFT + (at - lo) / (2.0 * -lo) * (BARS_RIGHT - BARS_LEFT)
    }

    fn ticks(&self) -> Vec<f64> {
        let steps: &[f64] = if self.span <= 10.0 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        (-6..=6)
            .flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|t| *t >= 1.0 / self.span * 0.999 && *t <= self.span * 1.001)
            .collect()
    }
}

fn ratio_bars(out: &mut String, report: &Report, y: &mut f64) {
    text(
        out,
        MARGIN,
        *y,
        15.0,
        "font-weight=\"bold\"",
        "Each metric ÷ the floor's (log scale)",
    );
    *y += 18.0;
    text(
        out,
        MARGIN,
        *y,
        11.5,
        &format!("fill=\"{MUTED}\""),
        "Shaded side of each row = better than the floor. Bold = the workload's headline metric.",
    );
    *y += 12.0;
    let axis = RatioAxis::new(
        report
            .workloads
            .iter()
            .flat_map(|w| &w.metrics)
            .flat_map(|m| m.ratio_to_floor.values().copied()),
    );
    let top = *y;
    for w in &report.workloads {
        let rows: Vec<_> = w
            .metrics
            .iter()
            .filter(|m| !m.ratio_to_floor.is_empty())
            .collect();
        if rows.is_empty() {
            continue;
        }
        line(
            out,
            (MARGIN, *y),
            (BARS_RIGHT, *y),
            &format!("stroke=\"{GRID}\""),
        );
        text(
            out,
            MARGIN,
            *y + 15.0,
            12.5,
            "font-weight=\"bold\"",
            w.workload.id(),
        );
        *y += 20.0;
        for m in rows {
            let bars = m.ratio_to_floor.len() as f64;
            let height = 10.0 + 11.0 * bars;
            let (from, to) = match m.better {
                Better::Higher => (axis.x(1.0), BARS_RIGHT),
                Better::Lower => (BARS_LEFT, axis.x(1.0)),
            };
            rect(
                out,
                from,
                *y,
                to - from,
                height,
                &format!("fill=\"{BETTER_SIDE}\""),
            );
            let mid = *y + height / 2.0 + 4.0;
            let weight = if m.headline {
                "font-weight=\"bold\" "
            } else {
                ""
            };
            let arrow = match m.better {
                Better::Higher => "↑",
                Better::Lower => "↓",
            };
            text(
                out,
                BARS_LEFT - 8.0,
                mid,
                12.0,
                &format!("{weight}text-anchor=\"end\""),
                &format!("{} {arrow}", m.name),
            );
            for (j, (subject, ratio)) in m.ratio_to_floor.iter().enumerate() {
                let bar_y = *y + 5.0 + 11.0 * j as f64;
                let (one, end) = (axis.x(1.0), axis.x(*ratio));
                let width = (end - one).abs().max(1.5);
                rect(
                    out,
                    one.min(end),
                    bar_y,
                    width,
                    9.0,
                    &format!("fill=\"{}\"", colour(report, subject)),
                );
                let label = show_ratio(*ratio);
                // Beside the bar's end, or inside it where the end is too
                // close to the row labels.
                let room = 7.0 * label.chars().count() as f64;
                let (label_x, attrs) = if *ratio >= 1.0 {
                    (one.max(end) + 4.0, "text-anchor=\"start\"")
                } else if end - room - 4.0 > BARS_LEFT {
                    (end - 4.0, "text-anchor=\"end\"")
                } else {
                    (end + 4.0, "text-anchor=\"start\" fill=\"white\"")
                };
                text(out, label_x, bar_y + 8.5, 10.5, attrs, &label);
            }
            *y += height + 2.0;
        }
    }
    for tick in axis.ticks() {
        let x = axis.x(tick);
        let stroke = if tick == 1.0 {
            format!("stroke=\"{INK}\" stroke-width=\"1.5\"")
        } else {
            format!("stroke=\"{GRID}\" stroke-dasharray=\"2 3\"")
        };
        line(out, (x, top), (x, *y), &stroke);
        text(
            out,
            x,
            *y + 14.0,
            10.5,
            &format!("text-anchor=\"middle\" fill=\"{MUTED}\""),
            &format!("{tick}×"),
        );
    }
    *y += 40.0;
    legend(out, report, y, true);
    *y += 20.0;
}

/// One swatch per contender; the floor only where it is drawn.
fn legend(out: &mut String, report: &Report, y: &mut f64, bars: bool) {
    let mut x = BARS_LEFT;
    for s in &report.subjects {
        if bars && s.role == Role::Floor {
            continue;
        }
        let c = colour(report, &s.name);
        if s.role == Role::Floor {
            line(
                out,
                (x, *y - 4.0),
                (x + 18.0, *y - 4.0),
                &format!("stroke=\"{c}\" stroke-width=\"2\" stroke-dasharray=\"5 3\""),
            );
        } else {
            rect(out, x, *y - 9.0, 18.0, 9.0, &format!("fill=\"{c}\""));
        }
        text(out, x + 24.0, *y, 11.5, "", &s.name);
        x += 40.0 + 7.0 * s.name.chars().count() as f64;
    }
}

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

fn latency_curves(out: &mut String, report: &Report, y: &mut f64) {
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
    w: &super::report::WorkloadReport,
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
    let points = |r: &super::workload::Run| -> Vec<[f64; 2]> {
        r.latency.as_ref().map_or_else(Vec::new, |d| {
            d.curve.iter().copied().filter(|p| p[0] <= 99.9).collect()
        })
    };
    let all: Vec<f64> = w
        .runs
        .iter()
        .flat_map(|r| points(r).into_iter().map(|p| p[1]))
        .filter(|v| *v > 0.0)
        .collect();
    let lo = all.iter().copied().fold(f64::MAX, f64::min).log10().floor();
    let hi = all
        .iter()
        .copied()
        .fold(0.0, f64::max)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let ly = |us: f64| {
        let at = us.max(10f64.powf(lo)).log10();
        plot_top + PANEL_HEIGHT - (at - lo) / (hi - lo) * PANEL_HEIGHT
    };
    let lx = |p: f64| plot_left + nines(p) / 3.0 * plot_w;
    rect(
        out,
        plot_left,
        plot_top,
        plot_w,
        PANEL_HEIGHT,
        &format!("fill=\"none\" stroke=\"{GRID}\""),
    );
    for decade in (lo as i32)..=(hi as i32) {
        let v = 10f64.powi(decade);
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

fn footer(out: &mut String, report: &Report, y: &mut f64) {
    let m = &report.machine;
    text(
        out,
        MARGIN,
        *y,
        11.0,
        &format!("fill=\"{MUTED}\""),
        &format!(
            "Measured {} on {} cores ({} {}), {}. Absolute numbers vary by machine; the ratios \
             to the floor are the point.",
            report.date, m.cores, m.os, m.arch, report.url
        ),
    );
    *y += 16.0;
    text(
        out,
        MARGIN,
        *y,
        11.0,
        &format!("fill=\"{MUTED}\""),
        "Regenerate: distlock bench --url URL --out DIR (see docs/BENCHMARKS.md).",
    );
    *y += MARGIN;
}
