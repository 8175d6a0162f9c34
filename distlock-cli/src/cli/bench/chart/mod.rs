//! The chart, as hand-written SVG: each metric's ratio to the floor as bars
//! on a log scale, then each workload's latency percentiles as lines.

use super::report::Report;

mod draw;
mod latency;
mod ratios;
pub(crate) mod sweep;

use draw::{MARGIN, document, footer, title};
use latency::latency_curves;
use ratios::ratio_bars;

/// The whole chart for one report.
pub(crate) fn svg(report: &Report) -> String {
    let mut out = String::new();
    let mut y = MARGIN;
    title(&mut out, report, &mut y);
    ratio_bars(&mut out, report, &mut y);
    latency_curves(&mut out, report, &mut y);
    footer(&mut out, report, &mut y);
    document(&out, y)
}
