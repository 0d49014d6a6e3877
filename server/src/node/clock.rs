//! The clock the driver reads, behind a trait so the simulator can substitute a drifting one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use picket_core::time::Instant;

/// Time as the driver sees it.
///
/// `now` feeds the core (election timeouts, session deadlines, the leader's batch stamps): it
/// must never go backwards. It is counted in milliseconds since the Unix epoch so that the log
/// time stamped by successive leaders stays comparable; the state machine takes
/// `max(previous, stamp)` anyway, so a leader whose clock is behind only slows log time down.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds, never decreasing.
    fn now(&self) -> Instant;
}

/// The process's clock: the wall clock read once at start, advanced by the monotonic clock
/// (`tokio::time::Instant`, which is the simulator's virtual time under `cfg(madsim)`).
#[derive(Debug)]
pub struct SystemClock {
    wall_at_start_ms: u64,
    start: tokio::time::Instant,
    last: AtomicU64,
}

impl SystemClock {
    pub fn new() -> Arc<SystemClock> {
        let wall_at_start_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Arc::new(SystemClock {
            wall_at_start_ms,
            start: tokio::time::Instant::now(),
            last: AtomicU64::new(0),
        })
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let ms = self.wall_at_start_ms.saturating_add(elapsed);
        // fetch_max keeps it monotonic even if two threads race.
        let prev = self.last.fetch_max(ms, Ordering::Relaxed);
        Instant::from_millis(prev.max(ms))
    }
}

/// A clock a test moves by hand.
#[derive(Debug, Default)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    pub fn new(ms: u64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            ms: AtomicU64::new(ms),
        })
    }

    pub fn advance(&self, ms: u64) {
        self.ms.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant::from_millis(self.ms.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(5);
        assert_eq!(clock.now(), Instant::from_millis(5));
        clock.advance(10);
        assert_eq!(clock.now(), Instant::from_millis(15));
    }
}
