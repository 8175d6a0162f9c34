//! What every part of the chart draws with: the page's sizes and colours,
//! SVG elements, a log axis, and the title, legend and footer.

use std::fmt::Write as _;

use crate::cli::bench::contender::{Role, Subject};
use crate::cli::bench::report::{Report, show_micros};

pub(super) const WIDTH: f64 = 960.0;
pub(super) const MARGIN: f64 = 30.0;
/// Where the bars' plot area starts; the row labels sit left of it.
pub(super) const BARS_LEFT: f64 = 290.0;
pub(super) const BARS_RIGHT: f64 = WIDTH - 70.0;
pub(super) const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
pub(super) const INK: &str = "#222";
pub(super) const MUTED: &str = "#666";
pub(super) const GRID: &str = "#ddd";
pub(super) const BETTER_SIDE: &str = "#e6f4e6";
/// The floor's line is dashed grey; the others take these colours in order.
pub(super) const COLOURS: &[&str] = &[
    "#2f6db5", "#b5462f", "#8a4fb5", "#2f9e8f", "#c28a1e", "#5a8a2f", "#b52f7a", "#2f8ab5",
    "#7a5a3a", "#4a4ab5", "#b5792f", "#3a7a5a",
];
pub(super) const FLOOR_COLOUR: &str = "#555";

/// `body` as a whole SVG document `height` high, on white.
pub(super) fn document(body: &str, height: f64) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" \
         viewBox=\"0 0 {WIDTH} {h}\" font-family=\"{FONT}\" fill=\"{INK}\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}</svg>\n",
        h = height.ceil()
    )
}

/// A log axis over `values`, in whole decades.
pub(super) struct LogAxis {
    pub(super) lo: f64,
    pub(super) hi: f64,
}

impl LogAxis {
    pub(super) fn new(values: impl Iterator<Item = f64>) -> Option<Self> {
        let (lo, hi) = values
            .filter(|v| *v > 0.0)
            .fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        (hi > 0.0).then(|| {
            let lo = lo.log10().floor();
            Self {
                lo,
                hi: hi.log10().ceil().max(lo + 1.0),
            }
        })
    }

    /// Where `v` falls between 0 (low end) and 1 (high end).
    pub(super) fn at(&self, v: f64) -> f64 {
        (v.max(10f64.powf(self.lo)).log10() - self.lo) / (self.hi - self.lo)
    }

    pub(super) fn decades(&self) -> impl Iterator<Item = f64> {
        ((self.lo as i32)..=(self.hi as i32)).map(|d| 10f64.powi(d))
    }
}

/// The colour of a contender's bars and lines.
pub(super) fn colour(report: &Report, subject: &str) -> &'static str {
    colour_among(&report.subjects, subject)
}

/// The colour of `subject`, one of `subjects`: the floor's grey, else the
/// next colour in the order the others are listed.
pub(super) fn colour_among(subjects: &[Subject], subject: &str) -> &'static str {
    subjects
        .iter()
        .filter(|s| s.role != Role::Floor)
        .position(|s| s.name == subject)
        .map_or(FLOOR_COLOUR, |i| COLOURS[i % COLOURS.len()])
}

pub(super) fn text(out: &mut String, x: f64, y: f64, size: f64, attrs: &str, body: &str) {
    let _ = writeln!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size}\" {attrs}>{}</text>",
        escape(body)
    );
}

pub(super) fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), attrs: &str) {
    let _ = writeln!(
        out,
        "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" {attrs}/>"
    );
}

pub(super) fn rect(out: &mut String, x: f64, y: f64, w: f64, h: f64, attrs: &str) {
    let _ = writeln!(
        out,
        "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" {attrs}/>"
    );
}

pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(super) fn title(out: &mut String, report: &Report, y: &mut f64) {
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

/// One swatch per contender; the floor only where it is drawn.
pub(super) fn legend(out: &mut String, report: &Report, y: &mut f64, bars: bool) {
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

pub(super) fn footer(out: &mut String, report: &Report, y: &mut f64) {
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
