//! A clock that drifts: each simulated node reads time through one, at a rate within the plan's
//! bound. It has the shape of the server driver's clock trait (`now() -> Instant`, never
//! decreasing).

use picket_core::time::Instant;

/// Milliseconds as a node sees them: `elapsed * (1 + ppm / 10^6)` from the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriftClock {
    pub ppm: i64,
}

impl DriftClock {
    /// The node's reading when `true_ms` simulated milliseconds have passed.
    pub fn at(&self, true_ms: u64) -> Instant {
        let scaled = i128::from(true_ms) * (1_000_000 + i128::from(self.ppm)) / 1_000_000;
        Instant::from_millis(u64::try_from(scaled.max(0)).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_scales_elapsed_time_and_never_goes_back() {
        let fast = DriftClock { ppm: 10_000 };
        let slow = DriftClock { ppm: -10_000 };
        assert_eq!(fast.at(1_000), Instant::from_millis(1_010));
        assert_eq!(slow.at(1_000), Instant::from_millis(990));
        let mut last = Instant::ZERO;
        for t in 0..5_000 {
            let now = slow.at(t);
            assert!(now >= last);
            last = now;
        }
    }
}
