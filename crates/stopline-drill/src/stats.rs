//! Percentiles and medians for drill figures, nearest-rank (no interpolation), so a p99 is
//! always a time some caller actually saw.

use serde::Serialize;

/// p50, p99 and max of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// The nearest-rank `q`-quantile (0 < q ≤ 1) of `sorted` (ascending); 0 for an empty sample:
/// [`stopline_bench::quantile`], the one definition every figure uses.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    stopline_bench::quantile(sorted, q).unwrap_or(0.0)
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

/// The median of `values` (the lower middle of an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[(sorted.len() - 1) / 2]
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
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.0);
    }
}
