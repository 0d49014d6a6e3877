//! What the storage tests share.

/// `times` the proptest cases configured (`PROPTEST_CASES`, 256 by default): for a cheap
/// model whose bugs hide in rare sequences.
pub fn cases_times(times: u32) -> u32 {
    let base = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256u32);
    base.saturating_mul(times)
}
