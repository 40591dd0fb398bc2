//! Summaries of repeated measurements: median with min and max, and latency percentiles.

use std::time::Duration;

/// Median, min and max of repeated runs of one figure.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for no samples.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        } else {
            sorted[middle]
        };
        Some(Self {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        })
    }
}

/// Latency percentiles of one series.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
}

impl Latency {
    /// `None` for no samples. Nearest-rank percentiles.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort();
        Some(Self {
            p50: nearest_rank(&sorted, 0.50)?,
            p99: nearest_rank(&sorted, 0.99)?,
            p999: nearest_rank(&sorted, 0.999)?,
        })
    }
}

/// The nearest-rank `quantile` (0 to 1) of samples sorted ascending: the smallest sample with
/// at least that share of them at or below it, always one that was measured. `None` for none.
pub fn nearest_rank<T: Copy>(sorted: &[T], quantile: f64) -> Option<T> {
    let index = (quantile * sorted.len() as f64).ceil() as usize;
    sorted.get(index.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// Microseconds, for tables.
pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_odd_and_even_counts() {
        let odd = Spread::of(&[3.0, 1.0, 2.0]).expect("samples");
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        let even = Spread::of(&[4.0, 1.0, 2.0, 3.0]).expect("samples");
        assert_eq!((even.median, even.min, even.max), (2.5, 1.0, 4.0));
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=1000).map(Duration::from_micros).collect();
        let latency = Latency::of(&samples).expect("samples");
        assert_eq!(latency.p50, Duration::from_micros(500));
        assert_eq!(latency.p99, Duration::from_micros(990));
        assert_eq!(latency.p999, Duration::from_micros(999));
        let one = Latency::of(&[Duration::from_micros(7)]).expect("samples");
        assert_eq!(one.p999, Duration::from_micros(7));
        assert!(Latency::of(&[]).is_none());
    }

    #[test]
    fn nearest_rank_takes_a_measured_sample_of_any_kind() {
        let millis = [1.5, 2.5, 3.5, 4.5];
        assert_eq!(nearest_rank(&millis, 0.50), Some(2.5));
        assert_eq!(nearest_rank(&millis, 0.99), Some(4.5));
        assert_eq!(nearest_rank(&millis, 0.0), Some(1.5));
        assert_eq!(nearest_rank::<f64>(&[], 0.50), None);
    }
}
