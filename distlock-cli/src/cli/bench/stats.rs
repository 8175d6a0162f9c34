//! Latency samples, the percentiles reported from them, and the interval of
//! a median.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The tail percentiles kept for the chart's lines besides every whole
/// percent.
const TAIL: &[f64] = &[99.5, 99.9];

/// The longest latency a histogram tells apart, in nanoseconds; longer ones
/// are recorded as this. Every wait ends at its slice's deadline, far below.
const LONGEST_NS: u64 = 600 * 1_000_000_000;

/// Latency samples of one client or one contender, in nanoseconds, to three
/// significant digits (a relative error below 0.1 %). Its memory is taken
/// once, when it is made, so recording a sample in a timed loop allocates
/// nothing.
#[derive(Clone, Debug)]
pub(crate) struct Samples(Histogram<u64>);

impl Samples {
    pub(crate) fn new() -> Self {
        Self(
            Histogram::new_with_bounds(1, LONGEST_NS, 3)
                .expect("fixed bounds of the latency histogram are valid"),
        )
    }

    /// Records one sample; never allocates.
    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.0.saturating_record(ns);
    }

    /// Adds another's samples to these.
    pub(crate) fn merge(&mut self, other: &Samples) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    pub(crate) fn len(&self) -> u64 {
        self.0.len()
    }

    /// The median, in µs; `None` when there are no samples.
    pub(crate) fn p50_us(&self) -> Option<f64> {
        (!self.0.is_empty()).then(|| self.at(50.0))
    }

    /// Nearest-rank percentile, in µs.
    fn at(&self, p: f64) -> f64 {
        let ns = if p >= 100.0 {
            self.0.max()
        } else if p <= 0.0 {
            self.0.min()
        } else {
            self.0.value_at_percentile(p)
        };
        // The middle of the sample's bucket: within 0.05 % of the sample.
        self.0.median_equivalent(ns) as f64 / 1e3
    }
}

impl Default for Samples {
    fn default() -> Self {
        Self::new()
    }
}

/// A latency distribution, in microseconds.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Distribution {
    /// How many samples.
    pub(crate) samples: u64,
    pub(crate) mean_us: f64,
    pub(crate) p50_us: f64,
    pub(crate) p90_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) max_us: f64,
    /// `[percentile, microseconds]` pairs from 0 to 100.
    pub(crate) curve: Vec<[f64; 2]>,
}

impl Distribution {
    /// `None` when there are no samples. The percentile `curve` (a hundred
    /// look-ups) only when asked for; empty otherwise.
    pub(crate) fn of(samples: &Samples, curve: bool) -> Option<Self> {
        if samples.0.is_empty() {
            return None;
        }
        let points = (0..=100u32)
            .map(f64::from)
            .chain(TAIL.iter().copied())
            .filter(|_| curve)
            .collect::<Vec<_>>();
        let mut curve: Vec<[f64; 2]> = points.into_iter().map(|p| [p, samples.at(p)]).collect();
        curve.sort_by(|a, b| a[0].total_cmp(&b[0]));
        Some(Self {
            samples: samples.len(),
            mean_us: samples.0.mean() / 1e3,
            p50_us: samples.at(50.0),
            p90_us: samples.at(90.0),
            p99_us: samples.at(99.0),
            max_us: samples.at(100.0),
            curve,
        })
    }
}

/// The median of some values with a distribution-free interval around it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct MedianInterval {
    pub(crate) median: f64,
    /// The interval's ends: order statistics of the values.
    pub(crate) low: f64,
    pub(crate) high: f64,
    /// The chance that the interval holds the true median, from the binomial
    /// distribution: at least 0.95 from 6 values on, less below that.
    pub(crate) confidence: f64,
    /// How many values.
    pub(crate) n: usize,
}

impl MedianInterval {
    /// The median of `values` and the order-statistic interval for it:
    /// `[x(k), x(n+1−k)]` with the largest `k` for which the interval holds
    /// the median with probability ≥ 95 % (k = 1 when even the whole range
    /// falls short). `None` for no values.
    pub(crate) fn of(mut values: Vec<f64>) -> Option<Self> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        // cdf = P(B ≤ k − 1) for B ~ Binomial(n, 1/2), summed in log space
        // so that thousands of slices do not underflow; [x(k), x(n+1−k)]
        // misses the median when B ≤ k − 1 or B ≥ n + 1 − k.
        let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
        let (mut ln_choose, mut cdf) = (0.0_f64, 0.0_f64);
        let (mut k, mut confidence) = (1, 1.0 - 2.0 * ln_half_n.exp());
        for j in 0..n {
            if j > 0 {
                ln_choose += ((n - j + 1) as f64).ln() - (j as f64).ln();
            }
            cdf += (ln_choose + ln_half_n).exp();
            let covered = 1.0 - 2.0 * cdf;
            if covered < 0.95 || 2 * (j + 1) > n + 1 {
                break;
            }
            (k, confidence) = (j + 1, covered);
        }
        Some(Self {
            median,
            low: values[k - 1],
            high: values[n - k],
            confidence,
            n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 1e-3
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::new();
        for n in (1..=100).rev() {
            s.record(Duration::from_millis(n));
        }
        let d = Distribution::of(&s, true).unwrap();
        assert_eq!(d.samples, 100);
        assert!(near(d.p50_us, 50_000.0), "{}", d.p50_us);
        assert!(near(d.p99_us, 99_000.0), "{}", d.p99_us);
        assert!(near(d.max_us, 100_000.0), "{}", d.max_us);
        assert!(near(d.curve[0][1], 1_000.0), "{:?}", d.curve[0]);
        assert!(d.curve.windows(2).all(|w| w[0][0] < w[1][0]));
        assert!(Distribution::of(&Samples::new(), true).is_none());
        assert!(Distribution::of(&s, false).unwrap().curve.is_empty());
    }

    #[test]
    fn samples_merge() {
        let (mut a, mut b) = (Samples::new(), Samples::new());
        a.record(Duration::from_micros(3));
        b.record(Duration::from_micros(5));
        b.record(Duration::from_micros(7));
        a.merge(&b);
        assert_eq!(a.len(), 3);
        assert!(near(a.p50_us().unwrap(), 5.0));
        assert!(Samples::new().p50_us().is_none());
    }

    #[test]
    fn median_interval_is_order_statistics() {
        // n = 10: P(B ≤ 1) = 11/1024, so [x(2), x(9)] covers 97.9 %.
        let m = MedianInterval::of((1..=10).rev().map(f64::from).collect()).unwrap();
        assert_eq!((m.median, m.low, m.high, m.n), (5.5, 2.0, 9.0, 10));
        assert!((m.confidence - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        // n = 5: even the whole range covers only 1 − 2/32.
        let m = MedianInterval::of(vec![3.0, 1.0, 2.0, 5.0, 4.0]).unwrap();
        assert_eq!((m.median, m.low, m.high), (3.0, 1.0, 5.0));
        assert!((m.confidence - (1.0 - 2.0 / 32.0)).abs() < 1e-12);
        // One value: a point, with no confidence.
        let m = MedianInterval::of(vec![0.9]).unwrap();
        assert_eq!((m.low, m.high, m.confidence), (0.9, 0.9, 0.0));
        // Thousands of values do not underflow, and the interval narrows.
        let m = MedianInterval::of((0..2000).map(f64::from).collect()).unwrap();
        assert!(
            m.confidence >= 0.95 && m.low > 900.0 && m.high < 1100.0,
            "{m:?}"
        );
        assert!(MedianInterval::of(Vec::new()).is_none());
    }
}
