//! Backup files on disk and restores from them (docs/storage.md, "Backup files" and "Restoring a
//! backup"; docs/runbooks/restore-from-backup.md):
//!
//! - [`write_file_atomically`], [`read_backup_file`]: a backup file written whole or not at
//!   all, and read and checked whole (re-exported from `picket_proto::backup`, which picketctl
//!   shares);
//! - [`restore_floor`]: the revision the restored cluster starts at, above every token the old
//!   cluster could have granted;
//! - [`restore_data_dir`]: one replica's data directory of the new cluster ([`restore_store`]:
//!   its store half, on any `Disk`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use picket_core::locks::{LockSnapshot, Revision, RESTORED_REVISION_MAX};
use picket_core::node::NodePersist;
use picket_core::paxos::{Persist, Slot};
use picket_proto::backup::Backup;
pub use picket_proto::backup::{read_backup_file, write_file_atomically};
use picket_proto::convert::records::decode_snapshot_record;
use picket_storage::{Disk, LogConfig, RealDisk, StorageConfig};

use crate::config::Config;
use crate::node::durable::{DurableStore, EmptyDataDir};

/// The default revision bump of a restore: 2^40 (about 1.1e12) commands above the newest
/// revision offered. The old cluster would have had to apply that many commands after the
/// newest backup or data directory offered: 12.7 days at a million commands a second, the rate
/// one core applies commands with no consensus at all (docs/PERFORMANCE.md, `locks_apply_cpu`),
/// far above what a cluster commits. Older backups: raise it, or offer newer sources.
pub const BUMP_REVISION_DEFAULT: u64 = 1 << 40;

/// The file in a restored replica's data directory that names its cluster: `picketd run`
/// refuses a configuration with another `cluster_id` (an old replica's configuration pointed
/// at a restored directory, or the reverse).
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// The slot a restored state is installed at: the new cluster's log starts after it, so a
/// replica that lacks it (a member added later) is sent the snapshot, never slots over an
/// empty state.
pub const RESTORED_SLOT: Slot = Slot(1);

/// What a restore starts the new cluster at, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Floor {
    /// The restored state's revision: the new cluster's first token is above it.
    pub revision: Revision,
    /// The highest revision any offered source says the old cluster reached.
    pub old_revision_max: u64,
    /// One line per source: what it said.
    pub sources: Vec<String>,
}

/// The revision a restore starts at: the highest revision the old cluster is known to have
/// reached (the backup restored, every other backup or old data directory in `more`) plus
/// `bump`. Every source is read only; one that cannot be read is an error (it was offered
/// because it may be newer).
pub fn restore_floor(backup: &Backup, more: &[PathBuf], bump: u64) -> Result<Floor, String> {
    if bump == 0 {
        return Err(
            "--bump-revision 0: the restored revision must be above the old cluster's (at least 1)"
                .to_owned(),
        );
    }
    let mut old = backup.state.revision.0;
    let mut sources = vec![format!("the backup restored: revision {old}")];
    for path in more {
        let (revision, what) = if path.is_dir() {
            data_dir_revision_bound(path)?
        } else {
            let other = read_backup_file(path)?;
            (
                other.state.revision.0,
                format!(
                    "backup {}: revision {}",
                    path.display(),
                    other.state.revision.0
                ),
            )
        };
        old = old.max(revision);
        sources.push(what);
    }
    let revision = old
        .checked_add(bump)
        .filter(|r| *r <= RESTORED_REVISION_MAX)
        .ok_or_else(|| {
            format!(
                "restore_revision_too_large: {old} + --bump-revision {bump} is above {RESTORED_REVISION_MAX}"
            )
        })?;
    Ok(Floor {
        revision: Revision(revision),
        old_revision_max: old,
        sources,
    })
}

/// An upper bound of the revision an old replica's data directory reached, read without
/// changing it: the newest snapshot's revision plus one per byte of every log segment (each
/// command it applied after its snapshot is in a log record of at least one byte).
fn data_dir_revision_bound(dir: &Path) -> Result<(u64, String), String> {
    let read_dir = |d: &Path| -> Result<Vec<PathBuf>, String> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(d)
            .map_err(|e| format!("cannot read {}: {e}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        out.sort();
        Ok(out)
    };
    let generations: Vec<PathBuf> = read_dir(dir)?
        .into_iter()
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("replica-"))
        })
        .collect();
    if generations.is_empty() {
        return Err(format!(
            "{}: not a picketd data directory (no replica-* directory in it)",
            dir.display()
        ));
    }
    let (mut snapshot_revision, mut log_bytes) = (0u64, 0u64);
    for generation in &generations {
        let snapshots = generation.join("snapshots");
        if snapshots.is_dir() {
            for file in read_dir(&snapshots)? {
                if file.extension().and_then(|e| e.to_str()) != Some("snap") {
                    continue;
                }
                let Ok(bytes) = std::fs::read(&file) else {
                    continue;
                };
                let Ok((_, payload)) = picket_storage::format::decode_blob(
                    picket_storage::format::SNAPSHOT_MAGIC,
                    &bytes,
                ) else {
                    continue;
                };
                if let Ok((_, state, _)) = decode_snapshot_record::<Arc<LockSnapshot>>(payload) {
                    snapshot_revision = snapshot_revision.max(state.revision.0);
                }
            }
        }
        let log = generation.join("log");
        if log.is_dir() {
            for file in read_dir(&log)? {
                let len = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
                log_bytes = log_bytes.saturating_add(len);
            }
        }
    }
    let bound = snapshot_revision.saturating_add(log_bytes);
    Ok((
        bound,
        format!(
            "data directory {}: at most revision {bound} (snapshot revision {snapshot_revision} + \
             {log_bytes} log bytes)",
            dir.display()
        ),
    ))
}

/// What [`restore_data_dir`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    pub data_dir: PathBuf,
    pub cluster_id: String,
    pub revision: Revision,
    /// The restored state's digest: every replica restored from the same backup with the same
    /// floor prints the same one.
    pub digest: u64,
    pub classes: usize,
    pub semaphores: usize,
    pub audit_records: usize,
    pub sessions_ended: usize,
    pub holds_ended: usize,
    pub waiters_dropped: usize,
    pub force_releases_dropped: usize,
}

/// Makes `config.data_dir` the data directory of a replica of a new cluster whose first state
/// is `backup`'s at revision `floor` (sessions, holds and waiters ended; see
/// `picket_core::locks::restore`). Refused, writing nothing, when the configuration names the
/// backup's cluster or the data directory holds anything.
pub fn restore_data_dir(
    config: &Config,
    backup: &Backup,
    floor: Revision,
) -> Result<Restored, String> {
    check_restorable(config, backup)?;
    let dir = &config.data_dir;
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        if entries.next().is_some() {
            return Err(format!(
                "restore_data_dir_not_empty: {} holds files: a restore writes only into an empty \
                 or missing data directory (move the old one away; offer it with --floor-from)",
                dir.display()
            ));
        }
    }
    let restored = restore_store(RealDisk, config, backup, floor)?;
    write_file_atomically(
        &dir.join(CLUSTER_ID_FILE),
        format!("{}\n", config.cluster_id).as_bytes(),
    )?;
    Ok(restored)
}

/// The rules a restore's configuration keeps: a new cluster id, a first member (not `join`).
fn check_restorable(config: &Config, backup: &Backup) -> Result<(), String> {
    if config.cluster_id == backup.header.cluster_id {
        return Err(format!(
            "restore_same_cluster_id: {} names cluster `{}`, the cluster the backup was taken \
             from: a restore makes a NEW cluster, so give it a new cluster_id (its replicas and \
             the old cluster's then refuse each other)",
            config.data_dir.display(),
            config.cluster_id
        ));
    }
    if config.join {
        return Err(
            "restore_join: a restored replica is a first member of the new cluster: \
                    remove `join = true` from its configuration (add more members later)"
                .to_owned(),
        );
    }
    Ok(())
}

/// The store half of [`restore_data_dir`] on any [`Disk`]: the backup's state made a new
/// cluster's at `floor` and installed at [`RESTORED_SLOT`] in a new store under
/// `config.data_dir`. It checks the configuration ([`check_restorable`]) but not that the
/// directory is empty, and writes no [`CLUSTER_ID_FILE`] (both `std::fs`, done by
/// `restore_data_dir`). The simulation restores its replicas' `SimDisk`s through it
/// (docs/simulation.md, `restore`).
pub fn restore_store<D: Disk + Clone + 'static>(
    disk: D,
    config: &Config,
    backup: &Backup,
    floor: Revision,
) -> Result<Restored, String> {
    check_restorable(config, backup)?;
    let dir = &config.data_dir;
    let state = backup.state.clone();
    let counts = (
        state.sessions.len(),
        state.locks.iter().map(|l| l.holders.len()).sum::<usize>(),
        state.locks.iter().map(|l| l.waiters.len()).sum::<usize>(),
        state.force_releases.len(),
    );
    let restored = state.into_new_cluster(floor).map_err(|e| e.to_string())?;
    let digest = picket_core::locks::LockStateMachine::restore(restored.clone())
        .map_err(|e| e.to_string())?
        .digest();
    let storage_config = StorageConfig {
        log: LogConfig {
            preallocate_bytes: config.storage.preallocate_bytes,
            write_mode: config.storage.write_mode.into(),
            ..LogConfig::default()
        },
        ..StorageConfig::default()
    };
    let (mut store, _) = DurableStore::open_with(disk, dir, storage_config, EmptyDataDir::Init)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let (classes, semaphores, audit_records) = (
        restored.classes.len(),
        restored.semaphores.len(),
        restored.audit.len(),
    );
    // The new cluster's first membership (CONFIG's members, with their addresses) goes with the
    // restored state, as `picketd run --init` records it: from then on the membership lives in
    // the log and its snapshots, so a replica that joins or rejoins with a contact list learns
    // it (without it, one that lost its durable state never finished recovery: found by the
    // simulation's `restore` fault, docs/simulation.md).
    let persist: NodePersist = Persist {
        id: 1,
        promised: None,
        accepted: Vec::new(),
        snapshot: Some((RESTORED_SLOT, Arc::new(restored))),
        schedule: Some(picket_core::paxos::Schedule::new(config.membership_first())),
        snapshot_local: false,
        incarnation: None,
        recovered: false,
    };
    store
        .persist_owned(vec![persist])
        .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    drop(store);
    Ok(Restored {
        data_dir: dir.clone(),
        cluster_id: config.cluster_id.clone(),
        revision: floor,
        digest,
        classes,
        semaphores,
        audit_records,
        sessions_ended: counts.0,
        holds_ended: counts.1,
        waiters_dropped: counts.2,
        force_releases_dropped: counts.3,
    })
}

/// Refuses a configuration whose `cluster_id` is not the one a restore wrote into its data
/// directory (nothing to check in a directory no restore made).
pub fn check_cluster_id(config: &Config) -> Result<(), String> {
    let path = config.data_dir.join(CLUSTER_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim() == config.cluster_id => Ok(()),
        Ok(text) => Err(format!(
            "restore_cluster_id_mismatch: {} was restored for cluster `{}`, the configuration \
             says `{}`: a restored replica and the old cluster's refuse each other",
            config.data_dir.display(),
            text.trim(),
            config.cluster_id
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Runs `[backup]` until shutdown: every interval (the first one at most 60 s after the start),
/// while this replica serves, a backup file of its applied state into the directory; the newest
/// `keep` of this replica's files are kept. Every run is counted on `/metrics`
/// (`picket_backups_total{outcome}`), a good one also sets
/// `picket_backup_last_success_timestamp_seconds`.
#[cfg(not(madsim))]
pub async fn run_schedule(
    api: crate::api::service::Api,
    section: crate::config::BackupSection,
    node_id: u64,
    metrics: Arc<crate::metrics::Metrics>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let interval = std::time::Duration::from_secs(section.interval_s);
    metrics.set_backup_interval(interval);
    let mut wait = interval.min(std::time::Duration::from_secs(60));
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = crate::shutdown::stopped(&mut shutdown) => return,
        }
        wait = interval;
        match scheduled_once(&api, &section, node_id).await {
            Ok(Some(path)) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                metrics.observe_backup("ok", Some(now));
                tracing::info!(file = %path.display(), "scheduled backup written");
            }
            Ok(None) => {
                metrics.observe_backup("skipped", None);
                tracing::info!("scheduled backup skipped: this replica does not serve now");
            }
            Err(error) => {
                metrics.observe_backup("failed", None);
                tracing::warn!(%error, "scheduled backup failed");
            }
        }
    }
}

/// The file name prefix of this replica's scheduled backups.
#[cfg(not(madsim))]
fn scheduled_prefix(cluster_id: &str, node_id: u64) -> String {
    format!("picket-{cluster_id}-node{node_id}-")
}

#[cfg(not(madsim))]
async fn scheduled_once(
    api: &crate::api::service::Api,
    section: &crate::config::BackupSection,
    node_id: u64,
) -> Result<Option<PathBuf>, String> {
    let status = api
        .driver
        .ask(|reply| crate::node::driver::Request::Status { reply })
        .await
        .map_err(|refusal| refusal.to_string())?;
    if status.not_serving_because().is_some() {
        return Ok(None);
    }
    let backup = crate::api::backup::take_backup(api, true)
        .await
        .map_err(|refusal| refusal.to_string())?;
    let prefix = scheduled_prefix(&api.driver.cluster_id, node_id);
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = section.dir.join(format!("{prefix}{unix_ms:013}.pkbk"));
    let (dir, keep, written) = (section.dir.clone(), section.keep, path.clone());
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        write_file_atomically(&written, &backup.bytes)?;
        prune(&dir, &prefix, keep)
    })
    .await
    .map_err(|e| format!("the backup writer stopped: {e}"))??;
    Ok(Some(path))
}

/// Removes all but the newest `keep` files named `<prefix>*.pkbk` in `dir` (names sort by time).
#[cfg(not(madsim))]
fn prune(dir: &Path, prefix: &str, keep: usize) -> Result<(), String> {
    let mut ours: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".pkbk"))
        })
        .collect();
    ours.sort();
    let excess = ours.len().saturating_sub(keep);
    for old in &ours[..excess] {
        std::fs::remove_file(old).map_err(|e| format!("cannot remove {}: {e}", old.display()))?;
    }
    Ok(())
}
