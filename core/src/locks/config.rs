//! Bounds and defaults of the lock state machine. Part of the replicated state (and of the
//! snapshot): every replica must apply the same log with the same bounds.

/// Bounds and defaults. Every bound, when hit, is answered with a typed error naming it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockConfig {
    /// Shortest session TTL a client may ask for (cluster-wide).
    pub session_ttl_ms_min: u64,
    /// Longest session TTL a client may ask for (cluster-wide). A class may lower it for the keys
    /// it covers: that bound is checked when such a key is acquired.
    pub session_ttl_ms_max: u64,
    /// TTL of a session created without one, and the default of the built-in default class.
    pub session_ttl_ms_default: u64,
    /// Live sessions at most.
    pub sessions_max: usize,
    /// Holds plus waits of one session at most (each wait may turn into a hold).
    pub holds_per_session_max: usize,
    /// Waiters queued on one key at most.
    pub waiters_per_key_max: usize,
    /// Replies remembered per session for retried request ids.
    pub dedup_window: usize,
    /// Classes registered per namespace at most.
    pub classes_per_namespace_max: usize,
    /// Pending force-release requests at most (cluster-wide).
    pub force_releases_pending_max: usize,
    /// How long a force-release request stays approvable, in log time.
    pub force_release_ttl_ms: u64,
    /// Audit records retained (oldest dropped first).
    pub audit_retention: usize,
    /// Watch events retained (oldest dropped first; older revisions answer `Compacted`).
    pub watch_retention: usize,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            session_ttl_ms_min: 1_000,
            session_ttl_ms_max: 300_000,
            session_ttl_ms_default: 10_000,
            sessions_max: 200_000,
            holds_per_session_max: 1_000,
            waiters_per_key_max: 1_000,
            dedup_window: 8,
            classes_per_namespace_max: 1_000,
            force_releases_pending_max: 1_000,
            force_release_ttl_ms: 10 * 60 * 1_000,
            audit_retention: 100_000,
            watch_retention: 100_000,
        }
    }
}

impl LockConfig {
    /// Checks that the bounds make sense together; a config that fails is a programming error of
    /// the caller (the server validates its config file before building a state machine).
    pub fn assert_valid(&self) {
        if let Err(problem) = self.validate() {
            panic!("invalid lock config: {problem}");
        }
    }

    /// The first rule the config breaks, if any.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.session_ttl_ms_min <= self.session_ttl_ms_default
            && self.session_ttl_ms_default <= self.session_ttl_ms_max)
        {
            return Err(format!(
                "session TTL bounds out of order: min {} default {} max {}",
                self.session_ttl_ms_min, self.session_ttl_ms_default, self.session_ttl_ms_max
            ));
        }
        let positive = [
            ("session_ttl_ms_min", self.session_ttl_ms_min as usize),
            ("sessions_max", self.sessions_max),
            ("holds_per_session_max", self.holds_per_session_max),
            ("waiters_per_key_max", self.waiters_per_key_max),
            ("dedup_window", self.dedup_window),
            ("watch_retention", self.watch_retention),
            ("audit_retention", self.audit_retention),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(format!("{name} is 0"));
            }
        }
        Ok(())
    }
}
