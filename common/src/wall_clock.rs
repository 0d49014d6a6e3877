//! Wall-clock text for people: log time (milliseconds since the Unix epoch, the leader's clock)
//! as UTC, shared by picketctl and the console.

/// Log time (milliseconds since the Unix epoch) as UTC, `2026-12-01T10:04:05.123Z`.
pub fn utc(ms: u64) -> String {
    let days = i64::try_from(ms / 86_400_000).unwrap_or(i64::MAX / 2);
    let in_day = ms % 86_400_000;
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000
    )
}

/// A duration in milliseconds as people read it: `950 ms`, `42 s`, `7 min 3 s`, `2 h 5 min`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{} s", ms / 1_000),
        60_000..=3_599_999 => format!("{} min {} s", ms / 60_000, ms / 1_000 % 60),
        _ => format!("{} h {} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_reads_as_iso_8601() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(1_796_119_445_123), "2026-12-01T10:04:05.123Z");
    }

    #[test]
    fn durations_read_in_the_largest_unit() {
        assert_eq!(duration(950), "950 ms");
        assert_eq!(duration(42_000), "42 s");
        assert_eq!(duration(423_000), "7 min 3 s");
        assert_eq!(duration(7_500_000), "2 h 5 min");
    }
}
