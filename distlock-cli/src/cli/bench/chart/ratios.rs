//! The chart's first part: each metric's ratio to the floor as bars on a
//! log scale.

use super::draw::*;
use crate::cli::bench::report::Report;

use crate::cli::bench::report::{Better, show_interval, show_ratio};

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

pub(super) fn ratio_bars(out: &mut String, report: &Report, y: &mut f64) {
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
        "Shaded side of each row = better than the floor. Bold = the workload's headline metric: \
         median of the per-slice ratios, whisker = its 95 % interval.",
    );
    *y += 12.0;
    let axis = RatioAxis::new(
        report
            .workloads
            .iter()
            .flat_map(|w| &w.metrics)
            .flat_map(|m| {
                m.ratio_to_floor.values().copied().chain(
                    m.paired_ratio_to_floor
                        .values()
                        .flat_map(|p| [p.low, p.high]),
                )
            }),
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
            for (j, (subject, pooled)) in m.ratio_to_floor.iter().enumerate() {
                let bar_y = *y + 5.0 + 11.0 * j as f64;
                // The headline shows the paired median and its interval.
                let paired = m.paired_ratio_to_floor.get(subject);
                let ratio = &paired.map_or(*pooled, |p| p.median);
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
                // How far the bar and its whisker reach either way.
                let (mut reach, mut back) = (one.max(end), end);
                if let Some(p) = paired {
                    let (lo, hi) = (axis.x(p.low), axis.x(p.high));
                    let mid = bar_y + 4.5;
                    let ink = format!("stroke=\"{INK}\" stroke-width=\"1.2\"");
                    line(out, (lo, mid), (hi, mid), &ink);
                    line(out, (lo, mid - 3.0), (lo, mid + 3.0), &ink);
                    line(out, (hi, mid - 3.0), (hi, mid + 3.0), &ink);
                    reach = reach.max(hi);
                    back = back.min(lo);
                }
                let label = paired.map_or_else(|| show_ratio(*ratio), show_interval);
                // Beside the bar's end, or inside it where the end is too
                // close to the row labels.
                let room = 7.0 * label.chars().count() as f64;
                let (label_x, attrs) = if *ratio >= 1.0 {
                    (reach + 4.0, "text-anchor=\"start\"")
                } else if back - room - 4.0 > BARS_LEFT {
                    (back - 4.0, "text-anchor=\"end\"")
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
