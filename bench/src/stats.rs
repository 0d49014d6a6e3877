//! The counting window and the percentiles of the reference workload (`../shared/bench`):
//! ops completing in `[warmup, warmup + duration]` (times since t0) are counted,
//! `ops_per_s = counted / duration`, p50/p99 are nearest-rank over the counted latencies.

/// One completed op: completion time since t0 and latency, both in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub end_us: u64,
    pub latency_us: u32,
}

/// The latencies (sorted, microseconds) of the samples that completed inside the window
/// `[window_start_us, window_end_us]` (both ends included, as in the reference).
pub fn counted(samples: &[Sample], window_start_us: u64, window_end_us: u64) -> Vec<u32> {
    let mut latencies: Vec<u32> = samples
        .iter()
        .filter(|s| s.end_us >= window_start_us && s.end_us <= window_end_us)
        .map(|s| s.latency_us)
        .collect();
    latencies.sort_unstable();
    latencies
}

/// Nearest-rank percentile `p` (0..=100) of `sorted` latencies in microseconds, in
/// milliseconds; NaN when empty. Rank = ceil(p/100 * n), clamped to 1..=n.
pub fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    f64::from(sorted[index]) / 1000.0
}

/// Mean of `sorted` latencies in milliseconds; NaN when empty.
pub fn mean_ms(sorted: &[u32]) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.iter().map(|&l| f64::from(l)).sum::<f64>() / sorted.len() as f64 / 1000.0
}

/// splitmix64, the reference's per-client key stream: client `i` is seeded with
/// `(i + 1) * 0x2545F4914F6CDD1D` and draws `next() % keys`.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn for_client(client: usize) -> SplitMix64 {
        SplitMix64((client as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(end_us: u64, latency_us: u32) -> Sample {
        Sample { end_us, latency_us }
    }

    #[test]
    fn only_ops_completing_inside_the_window_are_counted_ends_included() {
        let samples = [
            sample(999, 1),
            sample(1000, 2),
            sample(1500, 3),
            sample(2000, 4),
            sample(2001, 5),
        ];
        assert_eq!(counted(&samples, 1000, 2000), vec![2, 3, 4]);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<u32> = (1..=100).map(|ms| ms * 1000).collect();
        assert_eq!(percentile_ms(&sorted, 50.0), 50.0);
        assert_eq!(percentile_ms(&sorted, 99.0), 99.0);
        assert_eq!(percentile_ms(&sorted, 99.9), 100.0);
        assert_eq!(percentile_ms(&[7000], 50.0), 7.0);
        // rank = ceil(0.5 * 3) = 2 -> the middle one.
        assert_eq!(percentile_ms(&[1000, 2000, 3000], 50.0), 2.0);
        assert!(percentile_ms(&[], 50.0).is_nan());
        assert_eq!(mean_ms(&[1000, 3000]), 2.0);
    }

    #[test]
    fn splitmix_matches_the_reference_stream() {
        // splitmix64 seeded with 0: the published first outputs.
        let mut rng = SplitMix64(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        // Distinct clients draw distinct streams.
        assert_ne!(
            SplitMix64::for_client(0).next_u64(),
            SplitMix64::for_client(1).next_u64()
        );
    }
}
