//! The one quantile every figure of stopline uses: **nearest rank**, no interpolation. The
//! q-quantile of n sorted samples is the sample at rank ⌈q·n⌉ (1-based, clamped to 1..=n), so a
//! p99 is always a time some call actually took, and p50 of an even count is the lower middle.
//! The benches, the drill's observation and breakdown, and the sweep's medians all read their
//! figures through [`quantile`]; BENCHMARKS.md states the same definition.

use serde::{Deserialize, Serialize};

/// The nearest-rank `q`-quantile (0 ≤ q ≤ 1) of `sorted` (ascending); `T::default()` (zero) for
/// an empty sample.
pub fn quantile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The `p`th percentile (0..=100) of `sorted`: [`quantile`] at `p / 100`.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    quantile(sorted, p / 100.0)
}

/// p50, p99 and max of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// Round to microsecond precision in milliseconds (three decimals).
pub fn round_ms(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Summarize `samples` (milliseconds, any order).
pub fn summarize(samples: &[f64]) -> Summary {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    Summary {
        p50: round_ms(quantile(&sorted, 0.5)),
        p99: round_ms(quantile(&sorted, 0.99)),
        max: round_ms(sorted.last().copied().unwrap_or(0.0)),
    }
}

/// The median of `values` (any order): [`quantile`] at ½, the lower middle of an even count.
/// The one median of every bench (per-round figures, ratios, the drill's sweep).
pub fn median<T: Copy + Default + PartialOrd>(values: impl IntoIterator<Item = T>) -> T {
    let mut sorted: Vec<T> = values.into_iter().collect();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    quantile(&sorted, 0.5)
}

/// The [`median`] of figures a round may lack (nginx where it is not installed): `None` when
/// any round lacks it.
pub fn median_present(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let present: Option<Vec<f64>> = values.into_iter().collect();
    present.map(median)
}

/// p50, p99 and max of integer samples (µs, any order), by [`quantile`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

impl Spread {
    /// The spread of `samples` (sorted here).
    pub fn of(samples: &mut [u64]) -> Spread {
        samples.sort_unstable();
        Spread {
            p50: quantile(samples, 0.5),
            p99: quantile(samples, 0.99),
            max: samples.last().copied().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&samples);
        assert_eq!((s.p50, s.p99, s.max), (50.0, 99.0, 100.0));
        assert_eq!(summarize(&[3.0]).p99, 3.0);
        assert_eq!(summarize(&[]).p50, 0.0);
        assert_eq!(median([5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), 2.0);
    }

    #[test]
    fn one_definition_for_every_type() {
        let micros: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&micros, 50.0), 50);
        assert_eq!(percentile(&micros, 99.0), 99);
        assert_eq!(percentile(&micros, 100.0), 100);
        assert_eq!(percentile(&micros, 0.0), 1);
        assert_eq!(percentile(&[7u64], 99.0), 7);
        assert_eq!(percentile(&[1u64, 2, 3], 50.0), 2);
        assert_eq!(percentile::<u64>(&[], 50.0), 0);
        // Ten samples: p99 is the largest (rank ⌈9.9⌉ = 10), p50 the fifth.
        let ten: Vec<u64> = (1..=10).collect();
        assert_eq!((percentile(&ten, 50.0), percentile(&ten, 99.0)), (5, 10));
        let spread = Spread::of(&mut [9, 1, 5, 3, 7]);
        assert_eq!((spread.p50, spread.p99, spread.max), (5, 9, 9));
        let durations = [1, 2, 3, 4].map(std::time::Duration::from_millis);
        assert_eq!(
            quantile(&durations, 0.5),
            std::time::Duration::from_millis(2)
        );
    }
}
