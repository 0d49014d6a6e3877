//! picket-storage: the hand-written append-only log, hard state and snapshots of a Picket
//! replica, over a [`Disk`] trait with a real ([`RealDisk`]) and a simulated ([`SimDisk`])
//! implementation.
//!
//! Layout under a storage root (see `docs/storage.md` for every byte):
//!
//! ```text
//! <root>/log/00000000000000000001.seg   segments, named by their first index
//! <root>/hardstate                      the acceptor's hard state (atomic replace)
//! <root>/snapshots/<index>.snap         the newest snapshots (atomic replace, 2 kept)
//! ```
//!
//! ```
//! use std::path::Path;
//! use picket_storage::{SimDisk, Storage, StorageConfig};
//!
//! let disk = SimDisk::new(7);
//! let (mut st, report) = Storage::open(disk.clone(), Path::new("/node1"), StorageConfig::default())?;
//! assert!(report.torn_tail.is_none());
//! st.log.append(1, &[b"first".as_slice(), b"second".as_slice()])?;
//! st.log.sync()?; // one fdatasync for the whole batch
//! st.hard_state.save(b"promised ballot 3")?;
//!
//! disk.crash();
//! let (st, _) = Storage::open(disk.clone(), Path::new("/node1"), StorageConfig::default())?;
//! assert_eq!(st.log.read(1..3, u64::MAX)?, vec![b"first".to_vec(), b"second".to_vec()]);
//! assert_eq!(st.hard_state.load()?, Some(b"promised ballot 3".to_vec()));
//! # Ok::<(), picket_storage::Error>(())
//! ```

pub mod blob;
pub mod disk;
pub mod error;
pub mod format;
pub mod log;
pub mod recovery;
pub mod sim_disk;

use std::path::Path;

pub use blob::{DamagedSnapshot, HardStateFile, SnapshotLoad, SnapshotStore};
pub use disk::{Disk, DiskFile, RealDisk, RealFile};
pub use error::{CorruptionKind, Error, IoOp, Result};
pub use log::{Log, LogConfig, WriteMode};
pub use recovery::{ClearedSlot, RecoveryReport, TornTail};
pub use sim_disk::{CrashMode, SimDisk, SimFile};

/// Configuration of a whole [`Storage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// The log's sizes and limits.
    pub log: LogConfig,
    /// Largest hard state payload. Default 64 KiB.
    pub hard_state_len_max: u64,
    /// Largest snapshot payload. Default 1 GiB.
    pub snapshot_len_max: u64,
    /// Snapshot files kept (at least 2). Default 2.
    pub snapshots_kept: usize,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            log: LogConfig::default(),
            hard_state_len_max: 64 << 10,
            snapshot_len_max: 1 << 30,
            snapshots_kept: 2,
        }
    }
}

/// A replica's storage: log, hard state and snapshots under one root directory.
#[derive(Debug)]
pub struct Storage<D: Disk> {
    /// The log, recovered.
    pub log: Log<D>,
    /// The hard state file.
    pub hard_state: HardStateFile<D>,
    /// The snapshot directory.
    pub snapshots: SnapshotStore<D>,
}

impl<D: Disk + Clone> Storage<D> {
    /// Opens (creating if needed) and recovers the storage under `root`.
    pub fn open(
        disk: D,
        root: &Path,
        config: StorageConfig,
    ) -> Result<(Storage<D>, RecoveryReport)> {
        let (log, report) = Log::open(disk.clone(), &root.join("log"), config.log)?;
        let hard_state = HardStateFile::open(disk.clone(), root, config.hard_state_len_max)?;
        let snapshots = SnapshotStore::open(
            disk,
            &root.join("snapshots"),
            config.snapshots_kept,
            config.snapshot_len_max,
        )?;
        Ok((
            Storage {
                log,
                hard_state,
                snapshots,
            },
            report,
        ))
    }
}
