//! The statistics of stopline's benchmarks and of the drill: one quantile definition for every
//! figure `stopline bench` and `stopline drill` print, so a p50 printed beside another p50 means
//! the same thing (BENCHMARKS.md, "How figures are computed").
//!
//! The benches themselves still live beside the code they measure (the gateway's, the control
//! verbs', the supervisor's, `run`'s, the MCP sessions'); this crate is where they move. It does
//! no I/O and depends on nothing.
#![deny(missing_docs)]

/// The `q`-quantile (`0.0..=1.0`) of `sorted` (ascending) by the nearest-rank method: the
/// smallest sample with at least `q` of the samples at or below it, that is the sample of rank
/// `⌈q·n⌉` (1-based, at least 1). Always a sample that was observed, never an interpolation.
/// `None` when there are no samples.
///
/// `q·n` is taken to nine decimals before the ceiling, so a `q` written in decimal ranks as the
/// decimal says (`0.07 × 100` is `7.000000000000001` in binary floating point, rank 7, not 8).
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let exact = q.clamp(0.0, 1.0) * n as f64;
    let rank = ((exact * 1e9).round() / 1e9).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn nearest_rank_is_a_sample_at_rank_ceil_q_n() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&samples, 0.5), Some(50));
        assert_eq!(quantile(&samples, 0.99), Some(99));
        assert_eq!(quantile(&samples, 0.07), Some(7));
        assert_eq!(quantile(&samples, 1.0), Some(100));
        assert_eq!(quantile(&samples, 0.0), Some(1));
        let ten: Vec<u64> = (1..=10).collect();
        assert_eq!(quantile(&ten, 0.5), Some(5));
        assert_eq!(quantile(&ten, 0.99), Some(10));
        assert_eq!(quantile(&ten, 0.999), Some(10));
        assert_eq!(quantile(&[7u64], 0.99), Some(7));
        assert_eq!(quantile::<u64>(&[], 0.5), None);
    }
}
