//! The `ack-before-sync` broken build on the real server: a [`Disk`] that lies about
//! `sync_data` (answers at once, makes nothing durable). The server's driver still waits for
//! its "fsync" before acknowledging, so it acknowledges writes a crash then loses: persist
//! before reply is broken exactly as a disk (or a driver) that skipped the fsync would break
//! it. Harness-owned; nothing in the shipped code changes.

use std::io;
use std::path::Path;

use picket_storage::{Disk, DiskFile, SimDisk, SimFile};

#[derive(Clone, Debug)]
pub struct NoSyncDisk(pub SimDisk);

#[derive(Debug)]
pub struct NoSyncFile(SimFile);

impl Disk for NoSyncDisk {
    type File = NoSyncFile;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.0.create_dir_all(dir)
    }
    fn list_files(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.list_files(dir)
    }
    fn file_exists(&self, path: &Path) -> io::Result<bool> {
        self.0.file_exists(path)
    }
    fn open(&self, path: &Path) -> io::Result<NoSyncFile> {
        self.0.open(path).map(NoSyncFile)
    }
    fn create(&self, path: &Path) -> io::Result<NoSyncFile> {
        self.0.create(path).map(NoSyncFile)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.sync_dir(dir)
    }
}

impl DiskFile for NoSyncFile {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn write_all_at(&mut self, data: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    /// The lie: nothing is made durable.
    fn sync_data(&mut self) -> io::Result<()> {
        Ok(())
    }
}
