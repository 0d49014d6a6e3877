//! Reading Prometheus text exposition in tests (shared by `tests/support` and `tests/common`).

/// The value of the sample of `metric` whose labels contain every one of `labels`.
pub fn sample(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
