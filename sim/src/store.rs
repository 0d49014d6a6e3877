//! The simulated replica's durable state on a [`SimDisk`] (sim-local driver; the real server has
//! its own `durable.rs`): the core's `Persist` actions written through `picket-storage` with one
//! fdatasync per batch, and recovery into a [`NodeDurable`] at start.
//!
//! Layout on the node's disk:
//!
//! ```text
//! /boot/hardstate      boot counter and storage generation (16 bytes, replaced atomically)
//! /g<generation>/      picket-storage: log of `LogEntry` records, `HardState`, snapshots
//! ```
//!
//! When storage reports damage at open, the replica moves to a new, empty generation and starts
//! with its durable state **lost** (the core then neither promises nor accepts until it has
//! re-learned from a quorum), and writes the lost flag at once so that a crash before recovery
//! does not forget it.

use std::path::{Path, PathBuf};

use picket_core::locks::LockSnapshot;
use picket_core::node::{NodeCommand, NodeDurable};
use picket_core::paxos::{AcceptedEntry, Ballot, NodeId, Slot};
use picket_net::convert::paxos::{
    decode_hard_state, decode_log_entry, decode_snapshot_record, log_entry_to_wire,
    snapshot_to_wire, HardState,
};
use picket_storage::{HardStateFile, SimDisk, Storage, StorageConfig};
use prost::Message as _;
use thiserror::Error;

/// Why the store cannot go on; the replica stops until it is restarted.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Storage(#[from] picket_storage::Error),
    #[error("durable record does not decode: {0}")]
    Decode(String),
}

/// One `Persist` action of the core.
#[derive(Clone, Debug)]
pub struct PersistOp {
    pub promised: Option<Ballot>,
    pub accepted: Vec<AcceptedEntry<NodeCommand>>,
    pub snapshot: Option<(Slot, LockSnapshot)>,
    pub incarnation: Option<(NodeId, u64)>,
    pub recovered: bool,
}

/// What recovery found.
#[derive(Debug)]
pub struct Recovered {
    pub durable: NodeDurable,
    /// 1 for the first start of the disk; unique per start.
    pub boot: u64,
    /// The durable state was found damaged and the replica starts lost.
    pub lost_reason: Option<String>,
}

/// A replica's durable state.
pub struct Store {
    storage: Storage<SimDisk>,
    hard: HardState,
}

fn config() -> StorageConfig {
    let mut config = StorageConfig::default();
    // Small files keep the simulated disks' memory down (docs/storage.md).
    config.log.preallocate_bytes = 0;
    config.log.segment_size_bytes = 256 << 10;
    config
}

fn generation_dir(generation: u64) -> PathBuf {
    PathBuf::from(format!("/g{generation}"))
}

impl Store {
    /// Opens the disk after a (re)start: bumps the boot counter, recovers the durable state, and
    /// moves to a fresh generation (lost) if the current one is damaged.
    pub fn open(disk: &SimDisk) -> Result<(Store, Recovered), StoreError> {
        let mut boot_file = HardStateFile::open(disk.clone(), Path::new("/boot"), 64)?;
        let (boot_prev, mut generation) = match boot_file.load()? {
            Some(bytes) if bytes.len() == 16 => (
                u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes")),
            ),
            Some(bytes) => {
                return Err(StoreError::Decode(format!(
                    "boot record has {} bytes, expected 16",
                    bytes.len()
                )))
            }
            None => (0, 1),
        };
        let boot = boot_prev + 1;
        let mut lost_reason = None;
        let recovered = match Self::recover(disk, generation) {
            Ok(found) => found,
            Err(error) => {
                lost_reason = Some(error.to_string());
                generation += 1;
                let (storage, _) =
                    Storage::open(disk.clone(), &generation_dir(generation), config())?;
                let hard = HardState {
                    lost: true,
                    ..HardState::default()
                };
                let mut store = Store { storage, hard };
                store.save_hard_state()?;
                let durable = NodeDurable {
                    lost: true,
                    ..NodeDurable::default()
                };
                (store, durable)
            }
        };
        let mut record = boot.to_le_bytes().to_vec();
        record.extend_from_slice(&generation.to_le_bytes());
        boot_file.save(&record)?;
        let (store, durable) = recovered;
        Ok((
            store,
            Recovered {
                durable,
                boot,
                lost_reason,
            },
        ))
    }

    fn recover(disk: &SimDisk, generation: u64) -> Result<(Store, NodeDurable), StoreError> {
        let (storage, _report) =
            Storage::open(disk.clone(), &generation_dir(generation), config())?;
        let hard = match storage.hard_state.load()? {
            Some(bytes) => {
                decode_hard_state(&bytes).map_err(|e| StoreError::Decode(e.to_string()))?
            }
            None => HardState::default(),
        };
        let mut durable = NodeDurable {
            promised: hard.promised,
            incarnations: hard.incarnations.clone(),
            lost: hard.lost,
            ..NodeDurable::default()
        };
        let snapshots = storage.snapshots.load_latest()?;
        if !snapshots.damaged.is_empty() {
            return Err(StoreError::Decode(format!(
                "{} damaged snapshot(s)",
                snapshots.damaged.len()
            )));
        }
        if let Some((_, bytes)) = snapshots.latest {
            let snapshot = decode_snapshot_record::<LockSnapshot>(&bytes)
                .map_err(|e| StoreError::Decode(e.to_string()))?;
            durable.apply_persist(None, &[], Some(&snapshot), None, false);
        }
        let snapshot_slot = durable.snapshot.as_ref().map(|(slot, _)| *slot);
        let mut next = storage.log.first_index();
        while next < storage.log.next_index() {
            let records = storage.log.read(next..storage.log.next_index(), 1 << 20)?;
            next += records.len() as u64;
            for bytes in records {
                let entry = decode_log_entry::<NodeCommand>(&bytes)
                    .map_err(|e| StoreError::Decode(e.to_string()))?;
                if snapshot_slot.is_some_and(|slot| entry.0 <= slot) {
                    continue;
                }
                durable.apply_persist(None, &[entry], None, None, false);
            }
        }
        Ok((Store { storage, hard }, durable))
    }

    /// Writes one `Persist` and makes it durable (one log fdatasync; hard state and snapshots are
    /// replaced atomically). `sync: false` is the broken build that acknowledges log writes
    /// before they are durable (docs/simulation.md, "checkers bite").
    pub fn persist(&mut self, op: PersistOp, sync: bool) -> Result<(), StoreError> {
        if !op.accepted.is_empty() {
            let records: Vec<Vec<u8>> = op
                .accepted
                .into_iter()
                .map(|entry| log_entry_to_wire(entry).encode_to_vec())
                .collect();
            let first = self.storage.log.next_index();
            self.storage.log.append(first, &records)?;
            if sync {
                self.storage.log.sync()?;
            }
        }
        let newest_on_disk = self.storage.snapshots.indexes().iter().max().copied();
        if let Some((slot, snapshot)) = op
            .snapshot
            .filter(|(slot, _)| newest_on_disk.is_none_or(|n| slot.0 >= n))
        {
            let bytes = snapshot_to_wire((slot, snapshot)).encode_to_vec();
            self.storage.snapshots.save(slot.0, &bytes)?;
        }
        let mut hard_changed = false;
        if let Some(promised) = op.promised {
            hard_changed |= promised != self.hard.promised;
            self.hard.promised = promised;
        }
        if let Some((node, incarnation)) = op.incarnation {
            self.hard.incarnations.insert(node, incarnation);
            hard_changed = true;
        }
        if op.recovered && self.hard.lost {
            self.hard.lost = false;
            hard_changed = true;
        }
        if hard_changed {
            self.save_hard_state()?;
        }
        Ok(())
    }

    fn save_hard_state(&mut self) -> Result<(), StoreError> {
        let bytes = picket_net::proto::HardState::from(self.hard.clone()).encode_to_vec();
        self.storage.hard_state.save(&bytes)?;
        Ok(())
    }
}
