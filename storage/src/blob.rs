//! Hard state and snapshots: small and large opaque blobs, each written atomically.
//!
//! Atomic replacement: write `<name>.tmp`, `fdatasync` it, rename it over `<name>`, `fsync` the
//! directory. A crash at any point leaves either the old file or the new one under `<name>`
//! (and maybe a stale `.tmp`, removed at the next open). Each file carries a checksum
//! (see [`crate::format::encode_blob`]), so damage is detected, never read as data.

use std::path::{Path, PathBuf};

use crate::disk::{Disk, DiskFile};
use crate::error::{CorruptionKind, Error, IoOp, Result};
use crate::format::{self, BLOB_HEADER_LEN, HARD_STATE_MAGIC, SNAPSHOT_MAGIC};

/// Name of the hard state file in the storage root.
pub const HARD_STATE_FILE: &str = "hardstate";

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .expect("blob paths name a file")
        .to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes `bytes` to `path` atomically and durably (temp file, fdatasync, rename, fsync dir).
pub fn write_atomic<D: Disk>(disk: &D, path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new(""));
    let tmp = tmp_path(path);
    let mut file = disk.create(&tmp).map_err(Error::io(IoOp::Create, &tmp))?;
    file.write_all_at(bytes, 0)
        .map_err(Error::io(IoOp::Write, &tmp))?;
    file.sync_data().map_err(Error::io(IoOp::Fdatasync, &tmp))?;
    drop(file);
    disk.rename(&tmp, path)
        .map_err(Error::io(IoOp::Rename, &tmp))?;
    disk.sync_dir(dir).map_err(Error::io(IoOp::FsyncDir, dir))
}

/// Reads a whole file, refusing files longer than `len_max` (they are reported as corruption,
/// without reading them).
fn read_bounded<D: Disk>(disk: &D, path: &Path, len_max: u64) -> Result<Vec<u8>> {
    let file = disk.open(path).map_err(Error::io(IoOp::Open, path))?;
    let len = file.len().map_err(Error::io(IoOp::Stat, path))?;
    if len > len_max {
        return Err(Error::corruption(
            path,
            len_max,
            CorruptionKind::BadHeader("file longer than the configured maximum"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0)
        .map_err(Error::io(IoOp::Read, path))?;
    Ok(buf)
}

fn remove_stale_tmp<D: Disk>(disk: &D, dir: &Path, name: &str) -> Result<()> {
    let path = dir.join(name);
    disk.remove_file(&path)
        .map_err(Error::io(IoOp::RemoveFile, &path))
}

/// The hard state file (the acceptor's promised ballot and friends, opaque here).
///
/// There is no fallback: a damaged hard state is [`Error::Corruption`], because forgetting a
/// promise could break consensus.
#[derive(Debug)]
pub struct HardStateFile<D: Disk> {
    disk: D,
    dir: PathBuf,
    len_max: u64,
}

impl<D: Disk> HardStateFile<D> {
    /// Opens the hard state in `dir` (created if needed); payloads above `len_max` are refused.
    /// A `.tmp` left by a crash is removed.
    pub fn open(disk: D, dir: &Path, len_max: u64) -> Result<HardStateFile<D>> {
        disk.create_dir_all(dir)
            .map_err(Error::io(IoOp::CreateDirAll, dir))?;
        let tmp = format!("{HARD_STATE_FILE}.tmp");
        if disk
            .file_exists(&dir.join(&tmp))
            .map_err(Error::io(IoOp::Stat, dir))?
        {
            remove_stale_tmp(&disk, dir, &tmp)?;
        }
        Ok(HardStateFile {
            disk,
            dir: dir.to_path_buf(),
            len_max,
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(HARD_STATE_FILE)
    }

    /// The last saved hard state, or `None` if none was ever saved.
    pub fn load(&self) -> Result<Option<Vec<u8>>> {
        let path = self.path();
        if !self
            .disk
            .file_exists(&path)
            .map_err(Error::io(IoOp::Stat, &path))?
        {
            return Ok(None);
        }
        let buf = read_bounded(&self.disk, &path, BLOB_HEADER_LEN as u64 + self.len_max)?;
        match format::decode_blob(HARD_STATE_MAGIC, &buf) {
            Ok((_, payload)) => Ok(Some(payload.to_vec())),
            Err(why) => Err(Error::corruption(&path, 0, CorruptionKind::BadHeader(why))),
        }
    }

    /// Replaces the hard state, durably, before returning.
    pub fn save(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() as u64 > self.len_max {
            return Err(Error::BlobTooLarge {
                what: "hard state",
                len: payload.len() as u64,
                max: self.len_max,
            });
        }
        let bytes = format::encode_blob(HARD_STATE_MAGIC, 0, payload);
        write_atomic(&self.disk, &self.path(), &bytes)
    }
}

/// Name of the snapshot file for `index`.
pub fn snapshot_file_name(index: u64) -> String {
    format!("{index:020}.snap")
}

fn parse_snapshot_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".snap")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A snapshot that was skipped because it is damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedSnapshot {
    /// The file.
    pub file: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// The outcome of [`SnapshotStore::load_latest`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotLoad {
    /// The newest snapshot whose checksum holds: `(index, payload)`.
    pub latest: Option<(u64, Vec<u8>)>,
    /// Newer snapshots that were damaged and skipped, newest first.
    pub damaged: Vec<DamagedSnapshot>,
}

/// The snapshot directory: `<20-digit index>.snap` files, the newest `kept` of them retained.
#[derive(Debug)]
pub struct SnapshotStore<D: Disk> {
    disk: D,
    dir: PathBuf,
    /// How many snapshot files to keep (at least 2, so a damaged newest one has a fallback).
    kept: usize,
    len_max: u64,
    /// Indexes of the snapshot files on disk, ascending.
    indexes: Vec<u64>,
}

impl<D: Disk> SnapshotStore<D> {
    /// Opens the snapshot directory (created if needed), removing `.tmp` files left by a crash.
    /// `kept` is clamped to at least 2.
    pub fn open(disk: D, dir: &Path, kept: usize, len_max: u64) -> Result<SnapshotStore<D>> {
        disk.create_dir_all(dir)
            .map_err(Error::io(IoOp::CreateDirAll, dir))?;
        let mut indexes = Vec::new();
        for name in disk.list_files(dir).map_err(Error::io(IoOp::List, dir))? {
            if name.ends_with(".snap.tmp") {
                remove_stale_tmp(&disk, dir, &name)?;
            } else if let Some(index) = parse_snapshot_name(&name) {
                indexes.push(index);
            }
        }
        indexes.sort_unstable();
        Ok(SnapshotStore {
            disk,
            dir: dir.to_path_buf(),
            kept: kept.max(2),
            len_max,
            indexes,
        })
    }

    /// Indexes of the snapshot files on disk, ascending (damaged ones included).
    pub fn indexes(&self) -> &[u64] {
        &self.indexes
    }

    /// The newest snapshot whose checksum holds, and the newer ones that were damaged.
    pub fn load_latest(&self) -> Result<SnapshotLoad> {
        let mut damaged = Vec::new();
        for &index in self.indexes.iter().rev() {
            let path = self.dir.join(snapshot_file_name(index));
            let buf = match read_bounded(&self.disk, &path, BLOB_HEADER_LEN as u64 + self.len_max) {
                Ok(buf) => buf,
                Err(Error::Corruption { kind, .. }) => {
                    damaged.push(DamagedSnapshot {
                        file: path,
                        reason: kind.to_string(),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            match format::decode_blob(SNAPSHOT_MAGIC, &buf) {
                Ok((header, payload)) if header.index == index => {
                    return Ok(SnapshotLoad {
                        latest: Some((index, payload.to_vec())),
                        damaged,
                    });
                }
                Ok((header, _)) => damaged.push(DamagedSnapshot {
                    file: path,
                    reason: format!("header index {} differs from the file name", header.index),
                }),
                Err(why) => damaged.push(DamagedSnapshot {
                    file: path,
                    reason: why.to_string(),
                }),
            }
        }
        Ok(SnapshotLoad {
            latest: None,
            damaged,
        })
    }

    /// Saves a snapshot at `index`, durably; only then are snapshots beyond the newest `kept`
    /// removed. `index` must be at least that of every snapshot on disk; an equal index replaces
    /// that file atomically (e.g. re-taking a snapshot found damaged).
    pub fn save(&mut self, index: u64, payload: &[u8]) -> Result<()> {
        if let Some(&newest) = self.indexes.last() {
            if index < newest {
                return Err(Error::SnapshotNotNewer { index, newest });
            }
        }
        if payload.len() as u64 > self.len_max {
            return Err(Error::BlobTooLarge {
                what: "snapshot",
                len: payload.len() as u64,
                max: self.len_max,
            });
        }
        let path = self.dir.join(snapshot_file_name(index));
        write_atomic(
            &self.disk,
            &path,
            &format::encode_blob(SNAPSHOT_MAGIC, index, payload),
        )?;
        if self.indexes.last() != Some(&index) {
            self.indexes.push(index);
        }
        while self.indexes.len() > self.kept {
            let old = self.indexes[0];
            let old_path = self.dir.join(snapshot_file_name(old));
            self.disk
                .remove_file(&old_path)
                .map_err(Error::io(IoOp::RemoveFile, &old_path))?;
            self.indexes.remove(0);
        }
        self.disk
            .sync_dir(&self.dir)
            .map_err(Error::io(IoOp::FsyncDir, &self.dir))
    }
}
