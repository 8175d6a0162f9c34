//! Latency samples and the percentiles reported from them.

use std::time::Duration;

use serde::Serialize;

/// The tail percentiles kept for the chart's lines besides every whole
/// percent.
const TAIL: &[f64] = &[99.5, 99.9];

/// A latency distribution, in microseconds.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Distribution {
    /// How many samples.
    pub(crate) samples: usize,
    pub(crate) mean_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p90_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) max_us: f64,
    /// `[percentile, microseconds]` pairs from 0 to 100.
    pub(crate) curve: Vec<[f64; 2]>,
}

impl Distribution {
    /// `None` when there are no samples.
    pub(crate) fn of(mut samples: Vec<Duration>) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |p: f64| micros(percentile(&samples, p));
        let total: Duration = samples.iter().sum();
        let points = (0..=100u32)
            .map(f64::from)
            .chain(TAIL.iter().copied())
            .collect::<Vec<_>>();
        let mut curve: Vec<[f64; 2]> = points.into_iter().map(|p| [p, at(p)]).collect();
        curve.sort_by(|a, b| a[0].total_cmp(&b[0]));
        Some(Self {
            samples: samples.len(),
            mean_us: micros(total) / samples.len() as f64,
            p50_us: at(50.0),
            p90_us: at(90.0),
            p99_us: at(99.0),
            max_us: at(100.0),
            curve,
        })
    }
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let ms = |n| Duration::from_millis(n);
        let d = Distribution::of((1..=100).rev().map(ms).collect()).unwrap();
        assert_eq!(d.samples, 100);
        assert_eq!(d.p50_us, 50_000.0);
        assert_eq!(d.p99_us, 99_000.0);
        assert_eq!(d.max_us, 100_000.0);
        assert_eq!(d.curve.first(), Some(&[0.0, 1_000.0]));
        assert!(d.curve.windows(2).all(|w| w[0][0] < w[1][0]));
        assert!(Distribution::of(Vec::new()).is_none());
    }
}
