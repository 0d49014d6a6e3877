//! Time as a value. The core never reads a clock: the driver passes `now` in.

use std::fmt;

/// A point in time in milliseconds on the driver's monotonic clock (or, inside the lock state
/// machine, in log time: the leader's stamp, never decreasing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms)
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + ms`, saturating at the far future instead of wrapping.
    #[must_use]
    pub const fn add_ms(self, ms: u64) -> Self {
        Instant(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self`, or 0 if `earlier` is later.
    pub const fn ms_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(10);
        assert_eq!(t.add_ms(5).as_millis(), 15);
        assert_eq!(
            Instant::from_millis(u64::MAX).add_ms(1).as_millis(),
            u64::MAX
        );
        assert_eq!(t.ms_since(Instant::from_millis(4)), 6);
        assert_eq!(Instant::from_millis(4).ms_since(t), 0);
    }
}
