//! Prometheus metrics of a replica, in the text exposition format (`prometheus-client`).
//!
//! The driver calls the setters; `GET /metrics` ([`crate::api::http`]) serves [`Metrics::encode`].
//!
//! | metric | type | labels | set by |
//! |---|---|---|---|
//! | `picket_longest_hold_seconds` | gauge | namespace, key, class, fenced, owner, runbook_url, inspect_url, console_url | [`Metrics::set_namespace_stats`] |
//! | `picket_longest_hold_threshold_seconds` | gauge | namespace, class, fenced | same (absent when the class has no threshold) |
//! | `picket_longest_hold_queue_depth` | gauge | namespace, key | same |
//! | `picket_holds` | gauge | namespace | same |
//! | `picket_waiters` | gauge | namespace | same (queue depth summed over the namespace's keys) |
//! | `picket_sessions` | gauge | | [`Metrics::set_sessions`] |
//! | `picket_cluster_members`, `picket_cluster_learners` | gauge | | [`Metrics::set_membership`] |
//! | `picket_cluster_config_revision` | gauge | | same |
//! | `picket_cluster_member_lag_slots` | gauge (leader only) | node_id | same |
//! | `picket_external_url_info` | gauge (1) | url | [`Metrics::with_external_url`] (absent without one) |
//! | `picket_paxos_role` | gauge (1 for the current role) | role | [`Metrics::set_paxos`] |
//! | `picket_paxos_ballot_round`, `picket_paxos_ballot_node_id` | gauge | | same |
//! | `picket_paxos_slot_chosen`, `picket_paxos_slot_applied` | gauge | | same |
//! | `picket_storage_fsync_seconds` | histogram | | [`Metrics::observe_fsync`] |
//! | `picket_storage_fsync_errors_total` | counter | | [`Metrics::inc_fsync_errors`] |
//! | `picket_storage_recoveries_total` | counter (1 for this start's outcome) | outcome | [`Metrics::set_recovery`] |
//! | `picket_storage_recovery_seconds` | gauge | | same |
//! | `picket_replica_starts_total` | counter (the data directory's boot count) | | same |
//! | `picket_storage_durable_state_lost` | gauge (1 while re-learning) | | [`Metrics::set_durable_state_lost`] |
//! | `picket_storage_durable_state_lost_seconds` | gauge | | same |
//! | `picket_storage_compaction_seconds` | gauge (the last one) | | [`Metrics::set_compaction`] |
//! | `picket_storage_snapshot_save_failures_total` | counter | | [`Metrics::inc_snapshot_save_failures`] |
//! | `picket_backup_last_success_timestamp_seconds` | gauge (0: none yet) | | [`Metrics::observe_backup`] |
//! | `picket_backup_interval_seconds` | gauge (0: no `[backup]`) | | [`Metrics::set_backup_interval`] |
//! | `picket_backups_total` | counter | outcome (ok, failed, skipped) | [`Metrics::observe_backup`] |
//! | `picket_grpc_requests_total` | counter | method, code | [`Metrics::observe_request`] |
//! | `picket_grpc_request_duration_seconds` | histogram | method, code | same |
//! | `picket_peer_*_total` (connects, accepts, handshakes_refused, dials_failed, connections_silent, flushes, messages_sent, messages_received, messages_dropped with `reason`) | counter | reason (the drops) | [`Metrics::add_counters`] from `crate::node::peer::PeerCounters` |
//! | `picket_session_pushes_dropped_total` | counter | | [`Metrics::add_counters`] from `crate::api::session_push::LogFeed` |
//!
//! The alert rules in `deploy/prometheus/picket-alerts.yml` compare the first two. The longest
//! hold carries what the page needs (the class, its fenced flag, owner and runbook, and the key's
//! inspection link built on `external_url`, [`Metrics::with_external_url`]): its labels are all
//! functions of the namespace's oldest hold, so there is still one series per namespace.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picket_core::paxos::RoleKind;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tonic::Code;

mod counters;
mod from_state;
mod labels;
mod storage;
mod text;
use counters::CounterSources;
pub use counters::{CounterSource, SourcedCounter};
pub use from_state::{namespace_stats, WAITER_SCAN_KEYS_MAX};
use labels::{
    KeyLabels, LongestHoldLabels, MemberLabels, NamespaceLabels, OutcomeLabels, RequestLabels,
    RoleLabels, ThresholdLabels, UrlLabels,
};
use storage::{BackupMetrics, StorageMetrics};
pub use text::{code_name, percent_encode};
use text::{escape_label, saturate, saturate_u64};

/// At most this many namespaces are exported (the rest are dropped with a warning), so a
/// runaway number of namespaces cannot make a scrape unbounded.
pub const NAMESPACES_MAX: usize = 10_000;
/// At most this many distinct `method` label values; later ones are counted as `other`, so a
/// caller probing random paths cannot grow the series without bound.
pub const METHODS_MAX: usize = 128;

/// A hold with what a page about it needs: a namespace's longest hold, or a hold over its
/// class's max expected hold.
#[derive(Clone, Debug, PartialEq)]
pub struct PagedHold {
    pub key: String,
    pub held_for: Duration,
    /// The class of the key, its fenced flag and its max expected hold (zero: no threshold).
    pub class: String,
    pub fenced: bool,
    pub hold_max_expected: Duration,
    /// Waiters queued behind it.
    pub queue_depth: usize,
    /// The class's owner and runbook URL (empty when the class has none).
    pub owner: String,
    pub runbook_url: String,
}

/// One namespace's lock statistics, as the driver computes them from the state machine
/// (`longest_holds`, counts of holds and waiters).
#[derive(Clone, Debug, PartialEq)]
pub struct NamespaceStats {
    pub namespace: String,
    pub holds: usize,
    /// Waiters of all keys of the namespace.
    pub waiters: usize,
    pub longest_hold: Option<PagedHold>,
    /// Every hold of the namespace over its class's max expected hold (one per key, the
    /// furthest over first; at most `OVERDUE_HOLDS_PER_NAMESPACE_MAX`).
    pub overdue_holds: Vec<PagedHold>,
}

/// The newest membership the log scheduled, as this replica knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipStats {
    pub voters: usize,
    pub learners: usize,
    /// The first slot the membership governs.
    pub config_revision: u64,
    /// Leader only: (member, slots it is behind this replica's applied slot) for every other
    /// member that answered a heartbeat; empty elsewhere.
    pub lag: Vec<(u64, u64)>,
}

/// The replica's Paxos state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaxosStats {
    pub role: RoleKind,
    pub ballot_round: u64,
    pub ballot_node_id: u64,
    pub slot_chosen: u64,
    pub slot_applied: u64,
}

type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Clone)]
struct LatencyHistogram;

impl MetricConstructor<Histogram> for LatencyHistogram {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.0005, 2.0, 16))
    }
}

const ROLES: [(RoleKind, &str); 6] = [
    (RoleKind::Follower, "follower"),
    (RoleKind::PreCandidate, "pre_candidate"),
    (RoleKind::Candidate, "candidate"),
    (RoleKind::Leader, "leader"),
    (RoleKind::Recovering, "recovering"),
    (RoleKind::Removed, "removed"),
];

/// The `role` label value of a Paxos role (also `/healthz`'s `role`).
pub fn role_name(role: RoleKind) -> &'static str {
    ROLES
        .iter()
        .find(|(kind, _)| *kind == role)
        .map_or("unknown", |(_, name)| name)
}

/// The metrics of one replica. Share it behind an `Arc`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    /// The base URL of the links in the labels, without a trailing `/`.
    external_url: Option<String>,
    longest_hold: Family<LongestHoldLabels, FloatGauge>,
    longest_hold_threshold: Family<ThresholdLabels, FloatGauge>,
    longest_hold_queue_depth: Family<KeyLabels, Gauge>,
    overdue_hold: Family<LongestHoldLabels, FloatGauge>,
    overdue_hold_threshold: Family<KeyLabels, FloatGauge>,
    overdue_hold_queue_depth: Family<KeyLabels, Gauge>,
    holds: Family<NamespaceLabels, Gauge>,
    waiters: Family<NamespaceLabels, Gauge>,
    sessions: Gauge,
    cluster_members: Gauge,
    cluster_learners: Gauge,
    config_revision: Gauge,
    member_lag: Family<MemberLabels, Gauge>,
    paxos_role: Family<RoleLabels, Gauge>,
    ballot_round: Gauge,
    ballot_node_id: Gauge,
    slot_chosen: Gauge,
    slot_applied: Gauge,
    fsync: Histogram,
    storage: StorageMetrics,
    backup: BackupMetrics,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<RequestLabels, Histogram, LatencyHistogram>,
    /// The `method` label values seen so far (at most [`METHODS_MAX`]).
    methods: Mutex<BTreeSet<String>>,
    /// Counters kept elsewhere (atomics of the peer transport and the push feed), read at
    /// every scrape.
    sources: Arc<CounterSources>,
    /// Serializes replacing the namespace series with encoding them, so a scrape never sees a
    /// half-replaced set.
    namespace_lock: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics without links (`runbook_url` is the class's own, `inspect_url` empty).
    pub fn new() -> Metrics {
        Metrics::with_external_url(None)
    }

    /// Metrics whose longest-hold links start with `external_url` (`Config::external_url`):
    /// `<external_url>/v1/namespaces/<ns>/locks/<key>` and, for classes without their own
    /// runbook, `<external_url>/runbooks/stuck-lock.md`.
    pub fn with_external_url(external_url: Option<String>) -> Metrics {
        let external_url = external_url.map(|url| url.trim_end_matches('/').to_owned());
        let mut registry = Registry::default();
        let longest_hold = Family::<LongestHoldLabels, FloatGauge>::default();
        registry.register(
            "picket_longest_hold_seconds",
            "Age of the oldest hold of each namespace, with the key holding it, its class and links",
            longest_hold.clone(),
        );
        let longest_hold_threshold = Family::<ThresholdLabels, FloatGauge>::default();
        registry.register(
            "picket_longest_hold_threshold_seconds",
            "Max expected hold of the class of the namespace's oldest hold (alert threshold)",
            longest_hold_threshold.clone(),
        );
        let longest_hold_queue_depth = Family::<KeyLabels, Gauge>::default();
        registry.register(
            "picket_longest_hold_queue_depth",
            "Waiters queued behind the namespace's oldest hold",
            longest_hold_queue_depth.clone(),
        );
        let overdue_hold = Family::<LongestHoldLabels, FloatGauge>::default();
        registry.register(
            "picket_overdue_hold_seconds",
            "Age of every hold older than its class's max expected hold (one series per key), with its class and links",
            overdue_hold.clone(),
        );
        let overdue_hold_threshold = Family::<KeyLabels, FloatGauge>::default();
        registry.register(
            "picket_overdue_hold_threshold_seconds",
            "Max expected hold of the class of each overdue hold (the alert threshold)",
            overdue_hold_threshold.clone(),
        );
        let overdue_hold_queue_depth = Family::<KeyLabels, Gauge>::default();
        registry.register(
            "picket_overdue_hold_queue_depth",
            "Waiters queued behind each overdue hold",
            overdue_hold_queue_depth.clone(),
        );
        let holds = Family::<NamespaceLabels, Gauge>::default();
        registry.register("picket_holds", "Keys held, per namespace", holds.clone());
        let waiters = Family::<NamespaceLabels, Gauge>::default();
        registry.register(
            "picket_waiters",
            "Waiters queued, summed over the namespace's keys",
            waiters.clone(),
        );
        let sessions = Gauge::default();
        registry.register("picket_sessions", "Live sessions", sessions.clone());
        let cluster_members = Gauge::default();
        registry.register(
            "picket_cluster_members",
            "Voting members of the newest membership the log scheduled",
            cluster_members.clone(),
        );
        let cluster_learners = Gauge::default();
        registry.register(
            "picket_cluster_learners",
            "Learners (non-voting members) of the newest membership the log scheduled",
            cluster_learners.clone(),
        );
        let config_revision = Gauge::default();
        registry.register(
            "picket_cluster_config_revision",
            "The first slot the newest membership governs (rises with every change)",
            config_revision.clone(),
        );
        let member_lag = Family::<MemberLabels, Gauge>::default();
        registry.register(
            "picket_cluster_member_lag_slots",
            "Leader only: slots a member is behind the leader's applied slot, as its last heartbeat answer said",
            member_lag.clone(),
        );
        // The cluster-wide alerts' links: their rules find no other label to build them on
        // (and read it back with last_over_time once every replica is down).
        let external = Family::<UrlLabels, Gauge>::default();
        if let Some(url) = &external_url {
            external
                .get_or_create(&UrlLabels {
                    url: escape_label(url),
                })
                .set(1);
        }
        registry.register(
            "picket_external_url_info",
            "The external_url the alert links start with (value 1)",
            external,
        );
        let paxos_role = Family::<RoleLabels, Gauge>::default();
        registry.register(
            "picket_paxos_role",
            "1 for the replica's current Paxos role, 0 for the others",
            paxos_role.clone(),
        );
        let [ballot_round, ballot_node_id, slot_chosen, slot_applied] =
            std::array::from_fn(|_| Gauge::default());
        for (name, help, gauge) in [
            (
                "picket_paxos_ballot_round",
                "Round of the replica's ballot",
                &ballot_round,
            ),
            (
                "picket_paxos_ballot_node_id",
                "Node id of the replica's ballot",
                &ballot_node_id,
            ),
            (
                "picket_paxos_slot_chosen",
                "Highest slot known chosen",
                &slot_chosen,
            ),
            (
                "picket_paxos_slot_applied",
                "Highest slot applied",
                &slot_applied,
            ),
        ] {
            registry.register(name, help, gauge.clone());
        }
        let fsync = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        registry.register(
            "picket_storage_fsync_seconds",
            "Latency of the log's group-commit fsync",
            fsync.clone(),
        );
        let storage = StorageMetrics::register(&mut registry);
        let backup = BackupMetrics::register(&mut registry);
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "picket_grpc_requests",
            "gRPC requests answered, by method and status code",
            requests.clone(),
        );
        let request_seconds = Family::new_with_constructor(LatencyHistogram);
        registry.register(
            "picket_grpc_request_duration_seconds",
            "gRPC request latency, by method and status code",
            request_seconds.clone(),
        );
        let sources = Arc::new(CounterSources::default());
        registry.register_collector(Box::new(Arc::clone(&sources)));
        let metrics = Metrics {
            registry,
            external_url,
            longest_hold,
            longest_hold_threshold,
            longest_hold_queue_depth,
            overdue_hold,
            overdue_hold_threshold,
            overdue_hold_queue_depth,
            holds,
            waiters,
            sessions,
            cluster_members,
            cluster_learners,
            config_revision,
            member_lag,
            paxos_role,
            ballot_round,
            ballot_node_id,
            slot_chosen,
            slot_applied,
            fsync,
            storage,
            backup,
            requests,
            request_seconds,
            methods: Mutex::new(BTreeSet::new()),
            sources,
            namespace_lock: Mutex::new(()),
        };
        metrics.set_role(RoleKind::Follower);
        metrics
    }

    /// Replaces every namespace series with `stats` (namespaces not listed, and keys no longer
    /// the oldest hold, disappear).
    pub fn set_namespace_stats(&self, stats: &[NamespaceStats]) {
        if stats.len() > NAMESPACES_MAX {
            tracing::warn!(
                namespaces = stats.len(),
                "more than {NAMESPACES_MAX} namespaces: the rest are not exported"
            );
        }
        let _replacing = self.namespace_lock.lock().expect("namespace metrics lock");
        self.longest_hold.clear();
        self.longest_hold_threshold.clear();
        self.longest_hold_queue_depth.clear();
        self.overdue_hold.clear();
        self.overdue_hold_threshold.clear();
        self.overdue_hold_queue_depth.clear();
        self.holds.clear();
        self.waiters.clear();
        for ns in stats.iter().take(NAMESPACES_MAX) {
            let namespace = escape_label(&ns.namespace);
            let labels = NamespaceLabels {
                namespace: namespace.clone(),
            };
            self.holds.get_or_create(&labels).set(saturate(ns.holds));
            self.waiters
                .get_or_create(&labels)
                .set(saturate(ns.waiters));
            for hold in &ns.overdue_holds {
                let key = KeyLabels {
                    namespace: namespace.clone(),
                    key: escape_label(&hold.key),
                };
                self.overdue_hold
                    .get_or_create(&self.longest_hold_labels(&ns.namespace, hold))
                    .set(hold.held_for.as_secs_f64());
                self.overdue_hold_threshold
                    .get_or_create(&key)
                    .set(hold.hold_max_expected.as_secs_f64());
                self.overdue_hold_queue_depth
                    .get_or_create(&key)
                    .set(saturate(hold.queue_depth));
            }
            let Some(hold) = &ns.longest_hold else {
                continue;
            };
            let key = KeyLabels {
                namespace: namespace.clone(),
                key: escape_label(&hold.key),
            };
            self.longest_hold
                .get_or_create(&self.longest_hold_labels(&ns.namespace, hold))
                .set(hold.held_for.as_secs_f64());
            self.longest_hold_queue_depth
                .get_or_create(&key)
                .set(saturate(hold.queue_depth));
            if !hold.hold_max_expected.is_zero() {
                let threshold = ThresholdLabels {
                    namespace,
                    class: escape_label(&hold.class),
                    fenced: hold.fenced.to_string(),
                };
                self.longest_hold_threshold
                    .get_or_create(&threshold)
                    .set(hold.hold_max_expected.as_secs_f64());
            }
        }
    }

    fn longest_hold_labels(&self, namespace: &str, hold: &PagedHold) -> LongestHoldLabels {
        let runbook_url = match (&self.external_url, hold.runbook_url.is_empty()) {
            (_, false) => hold.runbook_url.clone(),
            // Picket's runbook, served rendered with this hold's namespace and key filled in.
            (Some(base), true) => format!(
                "{base}/runbooks/stuck-lock.md?namespace={}&key={}",
                percent_encode(namespace),
                percent_encode(&hold.key)
            ),
            (None, true) => String::new(),
        };
        let inspect_url = self.external_url.as_ref().map_or_else(String::new, |base| {
            format!(
                "{base}/v1/namespaces/{}/locks/{}",
                percent_encode(namespace),
                percent_encode(&hold.key)
            )
        });
        let console_url = self.external_url.as_ref().map_or_else(String::new, |base| {
            format!(
                "{base}/console/keys/{}/{}",
                percent_encode(namespace),
                percent_encode(&hold.key)
            )
        });
        LongestHoldLabels {
            namespace: escape_label(namespace),
            key: escape_label(&hold.key),
            class: escape_label(&hold.class),
            fenced: hold.fenced.to_string(),
            owner: escape_label(&hold.owner),
            runbook_url: escape_label(&runbook_url),
            inspect_url: escape_label(&inspect_url),
            console_url: escape_label(&console_url),
        }
    }

    pub fn set_sessions(&self, sessions: usize) {
        self.sessions.set(saturate(sessions));
    }

    /// The membership series; the lag series of members not in `stats.lag` disappear.
    pub fn set_membership(&self, stats: &MembershipStats) {
        self.cluster_members.set(saturate(stats.voters));
        self.cluster_learners.set(saturate(stats.learners));
        self.config_revision
            .set(saturate_u64(stats.config_revision));
        self.member_lag.clear();
        for (node, lag) in &stats.lag {
            self.member_lag
                .get_or_create(&MemberLabels {
                    node_id: node.to_string(),
                })
                .set(saturate_u64(*lag));
        }
    }

    pub fn set_paxos(&self, stats: PaxosStats) {
        self.set_role(stats.role);
        self.ballot_round.set(saturate_u64(stats.ballot_round));
        self.ballot_node_id.set(saturate_u64(stats.ballot_node_id));
        self.slot_chosen.set(saturate_u64(stats.slot_chosen));
        self.slot_applied.set(saturate_u64(stats.slot_applied));
    }

    fn set_role(&self, role: RoleKind) {
        for (kind, name) in ROLES {
            self.paxos_role
                .get_or_create(&RoleLabels { role: name })
                .set(i64::from(kind == role));
        }
    }

    /// One group-commit fsync took `duration`.
    pub fn observe_fsync(&self, duration: Duration) {
        self.fsync.observe(duration.as_secs_f64());
    }

    /// A group commit's fsync (of a file or directory) failed.
    pub fn inc_fsync_errors(&self) {
        self.storage.fsync_errors.inc();
    }

    /// This start's storage recovery: its outcome (one of [`crate::node::durable::RecoveryOutcome`]'s
    /// names; every outcome's series exists, this one at 1), how long it took, and the boot
    /// number of this start.
    pub fn set_recovery(
        &self,
        outcome: crate::node::durable::RecoveryOutcome,
        took: Duration,
        boot: u64,
    ) {
        for o in crate::node::durable::RecoveryOutcome::ALL {
            let counter = self
                .storage
                .recoveries
                .get_or_create(&OutcomeLabels { outcome: o.name() });
            if o == outcome {
                counter.inc();
            }
        }
        self.storage.recovery_seconds.set(took.as_secs_f64());
        self.storage
            .starts
            .inc_by(boot.saturating_sub(self.storage.starts.get()));
    }

    /// Whether the durable state is lost right now, and the time spent so with it this start.
    pub fn set_durable_state_lost(&self, lost: bool, for_time: Duration) {
        self.storage.lost.set(i64::from(lost));
        self.storage.lost_seconds.set(for_time.as_secs_f64());
    }

    /// The last snapshot save and log compaction took `duration`.
    pub fn set_compaction(&self, duration: Duration) {
        self.storage.compaction_seconds.set(duration.as_secs_f64());
    }

    /// Scheduled backups run every `interval` (`[backup]`).
    pub fn set_backup_interval(&self, interval: Duration) {
        self.backup.interval.set(interval.as_secs_f64());
    }

    /// A scheduled backup ended: `ok`, `failed` or `skipped`; a good one at Unix time `at`.
    pub fn observe_backup(&self, outcome: &'static str, at: Option<Duration>) {
        self.backup
            .runs
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        if let Some(at) = at {
            self.backup.last_success.set(at.as_secs_f64());
        }
    }

    /// A background snapshot save failed (the replica goes on; its log is kept).
    pub fn inc_snapshot_save_failures(&self) {
        self.storage.snapshot_save_failures.inc();
    }

    /// A gRPC call to `method` (e.g. `"/picket.v1.Admin/Inspect"`, the request path) was
    /// answered with `code` after `duration`. Beyond [`METHODS_MAX`] distinct methods, new ones
    /// are counted as `other`.
    pub fn observe_request(&self, method: &str, code: Code, duration: Duration) {
        let method = {
            let mut methods = self.methods.lock().expect("methods lock");
            if methods.contains(method) {
                escape_label(method)
            } else if methods.len() < METHODS_MAX {
                methods.insert(method.to_owned());
                escape_label(method)
            } else {
                "other".to_owned()
            }
        };
        let labels = RequestLabels {
            method,
            code: code_name(code),
        };
        self.requests.get_or_create(&labels).inc();
        self.request_seconds
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    /// Adds counters kept by `source` (read at every scrape). A counter both sources name is
    /// written once per source: add each kind of source once.
    pub fn add_counters(&self, source: Arc<dyn CounterSource>) {
        self.sources
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(source);
    }

    /// Everything, in the Prometheus text format (`text/plain; version=0.0.4`; the body ends
    /// with `# EOF`, which Prometheus accepts).
    pub fn encode(&self) -> String {
        let _reading = self.namespace_lock.lock().expect("namespace metrics lock");
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }
}

/// The content type of [`Metrics::encode`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests;
