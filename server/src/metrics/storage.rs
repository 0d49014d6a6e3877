//! The storage condition series (issue 17) and the scheduled backups' (issue 37).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{FloatGauge, OutcomeLabels};

/// The storage condition series (issue 17: storage faults are visible).
pub(super) struct StorageMetrics {
    pub(super) fsync_errors: Counter,
    pub(super) recoveries: Family<OutcomeLabels, Counter>,
    pub(super) recovery_seconds: FloatGauge,
    pub(super) starts: Counter,
    pub(super) lost: Gauge,
    pub(super) lost_seconds: FloatGauge,
    pub(super) compaction_seconds: FloatGauge,
    pub(super) snapshot_save_failures: Counter,
}

impl StorageMetrics {
    pub(super) fn register(registry: &mut Registry) -> StorageMetrics {
        let m = StorageMetrics {
            fsync_errors: Counter::default(),
            recoveries: Family::default(),
            recovery_seconds: FloatGauge::default(),
            starts: Counter::default(),
            lost: Gauge::default(),
            lost_seconds: FloatGauge::default(),
            compaction_seconds: FloatGauge::default(),
            snapshot_save_failures: Counter::default(),
        };
        registry.register(
            "picket_storage_fsync_errors",
            "Failed file or directory fsyncs of the durable store (the replica stops after one)",
            m.fsync_errors.clone(),
        );
        registry.register(
            "picket_storage_recoveries",
            "Storage recoveries at start, by outcome: clean, torn_tail_cut, durable_state_lost",
            m.recoveries.clone(),
        );
        registry.register(
            "picket_storage_recovery_seconds",
            "Time this start spent opening and replaying the durable store",
            m.recovery_seconds.clone(),
        );
        registry.register(
            "picket_replica_starts",
            "Starts of this data directory (its boot count): increase() counts restarts",
            m.starts.clone(),
        );
        registry.register(
            "picket_storage_durable_state_lost",
            "1 while the replica's durable state is lost and it re-learns it from the others",
            m.lost.clone(),
        );
        registry.register(
            "picket_storage_durable_state_lost_seconds",
            "Time this start has spent with its durable state lost (re-learning)",
            m.lost_seconds.clone(),
        );
        registry.register(
            "picket_storage_compaction_seconds",
            "Duration of the last snapshot save and log compaction",
            m.compaction_seconds.clone(),
        );
        registry.register(
            "picket_storage_snapshot_save_failures",
            "Background snapshot saves that failed (the log is kept; the replica goes on)",
            m.snapshot_save_failures.clone(),
        );
        m
    }
}

/// Scheduled backups (`[backup]`, issue 37).
pub(super) struct BackupMetrics {
    pub(super) last_success: FloatGauge,
    pub(super) interval: FloatGauge,
    pub(super) runs: Family<OutcomeLabels, Counter>,
}

impl BackupMetrics {
    pub(super) fn register(registry: &mut Registry) -> BackupMetrics {
        let m = BackupMetrics {
            last_success: FloatGauge::default(),
            interval: FloatGauge::default(),
            runs: Family::default(),
        };
        registry.register(
            "picket_backup_last_success_timestamp_seconds",
            "Unix time of this replica's last good scheduled backup ([backup]; 0: none yet); its age is time() minus it",
            m.last_success.clone(),
        );
        registry.register(
            "picket_backup_interval_seconds",
            "The [backup] interval of this replica (0: no scheduled backups)",
            m.interval.clone(),
        );
        registry.register(
            "picket_backups",
            "Scheduled backups attempted by this replica, by outcome: ok, failed, skipped (not serving)",
            m.runs.clone(),
        );
        m
    }
}
